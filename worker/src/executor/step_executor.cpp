// StepExecutor: validation, releases, copies, fills, sampling and results over a Backend
// (step_executor.h has the contract).
#include "tessera/worker/step_executor.h"

#include "blend_step.h"
#include "kv_directives.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "tessera/common/check.h"
#include "tessera/grammar/grammar.h"
#include "tessera/kernels/thread_pool.h"
#include "tessera/model/model.h"
#include "tessera/worker/sampler.h"

namespace tessera::worker {
namespace {

// Page ids of the plan's K/V offload directives (spills, reloads) against the pool.
Status validate_offload(const StepPlan& plan, int32_t num_pages) {
  auto bad = [&](const std::string& where, int32_t page) {
    return make_error(ErrorCode::kOutOfRange, where + ": page " + std::to_string(page) + " outside the pool [0, " +
                                                  std::to_string(num_pages) + ")");
  };
  for (size_t i = 0; i < plan.spills.size(); ++i) {
    if (plan.spills[i].page < 0 || plan.spills[i].page >= num_pages) return bad("spills[" + std::to_string(i) + "]", plan.spills[i].page);
  }
  for (size_t i = 0; i < plan.reloads.size(); ++i) {
    const KvReload& r = plan.reloads[i];
    if (r.pages.size() != r.hashes.size()) {
      return make_error(ErrorCode::kInvalidArgument, "reloads[" + std::to_string(i) + "]: " + std::to_string(r.pages.size()) +
                                                         " pages for " + std::to_string(r.hashes.size()) + " hashes");
    }
    for (int32_t page : r.pages) {
      if (page < 0 || page >= num_pages) return bad("reloads[" + std::to_string(i) + "]", page);
    }
  }
  return ok_status();
}


bool plain_greedy(const SamplingParams& p) {
  return (p.temperature == 0.0f || p.top_k == 1) && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f && !p.logprobs && p.top_logprobs == 0 && p.logit_bias.empty() && p.grammar.empty();
}

// The first capability sampling with `p` needs (common/step_plan.h) that `have` (the backend's
// capability_names) lacks, or "".
std::string_view missing_sampling_option(const SamplingParams& p, const std::vector<std::string>& have) {
  for (std::string_view need : required_sampling_capabilities(p)) {
    if (std::find(have.begin(), have.end(), need) == have.end()) return need;
  }
  return {};
}

constexpr int32_t kMaxPromptTop = 20;

// The log-probabilities of the next tokens of one scored chunk (SeqPlan::prompt_logprobs) from
// its rows of logits (one per token, before any sampling touches the last): row i scores
// tokens[i + 1], the last row next_token (none when -1). Raw log-softmax of the model's logits.
PromptLogprobs score_prompt(const SeqPlan& s, std::span<const float> rows, int32_t vocab) {
  PromptLogprobs out;
  out.request_id = s.request_id;
  out.first_pos = s.start_pos + 1;
  const size_t v = static_cast<size_t>(vocab);
  const size_t k = static_cast<size_t>(s.sampling.prompt_logprobs);
  std::vector<int32_t> order(k > 0 ? v : 0);
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    const int32_t next = i + 1 < s.tokens.size() ? s.tokens[i + 1] : s.next_token;
    if (next < 0) break;
    const float* row = rows.data() + i * v;
    const float mx = *std::max_element(row, row + v);
    double z = 0.0;  // as the Sampler computes a sampled token's log-probability
    for (size_t t = 0; t < v; ++t) z += std::exp(static_cast<double>(row[t]) - mx);
    const double lse = mx + std::log(z);
    out.logprobs.push_back(static_cast<float>(row[next] - lse));
    if (k > 0) {
      for (size_t t = 0; t < v; ++t) order[t] = static_cast<int32_t>(t);
      const size_t n = std::min(k, v);
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                        [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      std::vector<TokenLogprob>& top = out.top.emplace_back();
      for (size_t j = 0; j < n; ++j) top.push_back({order[j], static_cast<float>(row[order[j]] - lse)});
    }
  }
  return out;
}

}  // namespace

struct StepExecutor::State {
  std::unordered_map<uint64_t, std::unique_ptr<Sampler>> samplers;  // live request states
  std::unordered_map<uint64_t, H2oState> h2o;                       // H2O statistic per request (kv_directives.h)
  BlendRows blend;                                                  // CacheBlend rows; reused tokens across steps
  FillHandler fill_handler;                                         // may be empty
  OffloadHandler* offload = nullptr;                                // not owned; may be null
  std::vector<SeqInput> batch;                                      // reused
  std::shared_ptr<const grammar::TokenVocabulary> grammar_vocab;    // null: no structured output
  // Compiled schemas by text, most recently used last (at most kSchemaCache).
  std::vector<std::pair<std::string, std::shared_ptr<const grammar::Schema>>> schemas;
  static constexpr size_t kSchemaCache = 64;

  Result<std::shared_ptr<const grammar::Schema>> schema(const std::string& text) {
    for (size_t i = 0; i < schemas.size(); ++i) {
      if (schemas[i].first != text) continue;
      auto hit = std::move(schemas[i]);
      schemas.erase(schemas.begin() + static_cast<std::ptrdiff_t>(i));
      schemas.push_back(std::move(hit));
      return schemas.back().second;
    }
    TS_ASSIGN_OR_RETURN(auto compiled, grammar::compile_json_schema(text));
    if (schemas.size() >= kSchemaCache) schemas.erase(schemas.begin());
    schemas.emplace_back(text, compiled);
    return compiled;
  }
};

void StepExecutor::set_grammar_vocabulary(std::shared_ptr<const grammar::TokenVocabulary> vocab) {
  state_->grammar_vocab = std::move(vocab);
}

StepExecutor::StepExecutor(Backend& backend) : backend_(backend), state_(std::make_unique<State>()) {}
StepExecutor::~StepExecutor() = default;

void StepExecutor::set_fill_handler(FillHandler handler) { state_->fill_handler = std::move(handler); }
bool StepExecutor::has_fill_handler() const { return static_cast<bool>(state_->fill_handler); }
void StepExecutor::set_offload_handler(OffloadHandler* handler) { state_->offload = handler; }
size_t StepExecutor::num_request_states() const { return state_->samplers.size(); }
void StepExecutor::reset_requests() {
  state_->samplers.clear();
  state_->blend.reused.clear();
  state_->h2o.clear();
}
std::vector<std::string> StepExecutor::capabilities() const {
  std::vector<std::string> out = capability_names(backend_.name(), backend_.capabilities());
  if (state_->grammar_vocab) out.emplace_back("grammar");
  if (state_->offload != nullptr) out.emplace_back("kv_offload");
  return out;
}

Result<std::span<const float>> StepExecutor::forward(std::span<const SeqInput> batch) {
  TS_TRY(validate_batch(backend_.geometry(), backend_.capabilities(), backend_.model().config().vocab_size, batch));
  TS_ASSIGN_OR_RETURN(std::span<float> logits, backend_.forward(batch));
  return std::span<const float>(logits);
}

Status StepExecutor::check_capabilities(const StepPlan& plan) const {
  const BackendCaps caps = backend_.capabilities();
  const std::string step = "step " + std::to_string(plan.step_id);
  if (!plan.fills.empty() && !caps.kv_fill) {
    return make_error(ErrorCode::kUnsupported, step + ": fills[0] (request " + std::to_string(plan.fills[0].request_id) +
                                                   ") needs capability kv_fill (preference K/V injection), which the " +
                                                   std::string(backend_.name()) + " backend lacks");
  }
  const std::vector<std::string> have = capabilities();
  const bool has_kv_policy = std::find(have.begin(), have.end(), "kv_policy") != have.end();
  for (const SeqPlan& s : plan.seqs) {
    if (!has_kv_policy && uses_kv_policy(s)) {
      return make_error(ErrorCode::kUnsupported, step + ": request " + std::to_string(s.request_id) +
                                                     " needs capability kv_policy (StreamingLLM / H2O K/V), which the " +
                                                     std::string(backend_.name()) + " backend lacks");
    }
    if (!s.blend_chunks.empty() && !caps.chunk_blend) {
      return make_error(ErrorCode::kUnsupported, step + ": request " + std::to_string(s.request_id) +
                                                     " needs capability chunk_blend (CacheBlend), which the " +
                                                     std::string(backend_.name()) + " backend lacks");
    }
    if (s.prompt_logprobs && !caps.prompt_logprobs) {
      return make_error(ErrorCode::kUnsupported, step + ": request " + std::to_string(s.request_id) +
                                                     " needs capability prompt_logprobs (prompt log-probabilities), which the " +
                                                     std::string(backend_.name()) + " backend lacks");
    }
    if (!s.sample) continue;
    if (const std::string_view missing = missing_sampling_option(s.sampling, have); !missing.empty()) {
      return make_error(ErrorCode::kUnsupported, step + ": request " + std::to_string(s.request_id) +
                                                     " needs capability " + std::string(missing) +
                                                     " (sampling), which the " +
                                                     std::string(backend_.name()) + " backend lacks");
    }
  }
  return ok_status();
}

Result<StepResult> StepExecutor::execute(const StepPlan& plan) {
  const auto t0 = std::chrono::steady_clock::now();
  State& st = *state_;
  const PoolGeometry pool = backend_.geometry();
  const int32_t vocab = backend_.model().config().vocab_size;

  // 1. Validate the whole plan before touching anything.
  TS_TRY(check_capabilities(plan));
  if (!plan.fills.empty() && !st.fill_handler) {
    // The message keeps the wording tests/unit/worker_engine checks for a bare Engine.
    return make_error(ErrorCode::kUnsupported, "not implemented yet: kvstore fill (preference K/V injection) without a fill "
                                               "handler (PreferenceInjector::attach), step " + std::to_string(plan.step_id));
  }
  for (size_t i = 0; i < plan.fills.size(); ++i) {
    for (int32_t page : plan.fills[i].pages) {
      if (page < 0 || page >= pool.num_pages) {
        return make_error(ErrorCode::kOutOfRange, "fills[" + std::to_string(i) + "]: page " + std::to_string(page) +
                                                      " outside the pool [0, " + std::to_string(pool.num_pages) + ")");
      }
    }
  }
  if ((!plan.spills.empty() || !plan.reloads.empty()) && st.offload == nullptr) {
    return make_error(ErrorCode::kUnsupported, "step " + std::to_string(plan.step_id) +
                                                   ": K/V spills or reloads need capability kv_offload (tessera-worker "
                                                   "--kv-offload with --kvstore), which this worker lacks");
  }
  TS_TRY(validate_offload(plan, pool.num_pages));
  for (size_t i = 0; i < plan.copies.size(); ++i) {
    const PageCopy& c = plan.copies[i];
    if (c.src < 0 || c.src >= pool.num_pages || c.dst < 0 || c.dst >= pool.num_pages) {
      return make_error(ErrorCode::kOutOfRange, "copies[" + std::to_string(i) + "]: page " + std::to_string(c.src) + " -> " +
                                                    std::to_string(c.dst) + " outside the pool [0, " +
                                                    std::to_string(pool.num_pages) + ")");
    }
  }
  std::unordered_set<uint64_t> ids;
  std::unordered_map<uint64_t, std::shared_ptr<const grammar::Schema>> new_grammars;  // for new sampler states
  std::vector<SeqInput>& batch = st.batch;
  batch.clear();
  bool all_greedy = true;
  size_t n_sampled = 0;
  for (const SeqPlan& s : plan.seqs) {
    if (!ids.insert(s.request_id).second) {
      return make_error(ErrorCode::kInvalidArgument, "request " + std::to_string(s.request_id) + " appears twice in step " +
                                                         std::to_string(plan.step_id));
    }
    if (s.sample) {
      Status vs = validate_sampling_params(s.sampling);
      if (!vs.ok()) return make_error(vs.error().code, "request " + std::to_string(s.request_id) + ": " + vs.error().message);
      for (int32_t g : s.generated) {
        if (g < 0 || g >= vocab) {
          return make_error(ErrorCode::kOutOfRange, "request " + std::to_string(s.request_id) + ": generated token " +
                                                        std::to_string(g) + " is outside the vocabulary");
        }
      }
      if (!s.sampling.grammar.empty() && !st.samplers.count(s.request_id)) {
        auto schema = st.schema(s.sampling.grammar);
        if (!schema.ok()) {
          return make_error(schema.error().code, "request " + std::to_string(s.request_id) + ": grammar: " + schema.error().message);
        }
        new_grammars[s.request_id] = std::move(schema).value();
      }
      ++n_sampled;
      all_greedy = all_greedy && plain_greedy(s.sampling);
    }
    if (uses_kv_policy(s)) {
      if (Status vk = validate_kv_directives(s, pool); !vk.ok()) {
        return make_error(vk.error().code, "step " + std::to_string(plan.step_id) + ": " + vk.error().message);
      }
    }
    if (s.prompt_logprobs) {
      if (s.sampling.prompt_logprobs < 0 || s.sampling.prompt_logprobs > kMaxPromptTop) {
        return make_error(ErrorCode::kOutOfRange, "request " + std::to_string(s.request_id) + ": sampling.prompt_logprobs " +
                                                      std::to_string(s.sampling.prompt_logprobs) + " outside [0, 20]");
      }
      if (s.next_token < -1 || s.next_token >= vocab) {
        return make_error(ErrorCode::kOutOfRange, "request " + std::to_string(s.request_id) + ": next_token " +
                                                      std::to_string(s.next_token) + " is outside the vocabulary");
      }
      all_greedy = false;  // the scored rows are copied back: no device argmax in this step
    }
    if (!s.blend_chunks.empty()) {
      if (Status vb = validate_blend(s); !vb.ok()) {
        return make_error(vb.error().code, "step " + std::to_string(plan.step_id) + ": " + vb.error().message);
      }
    }
    batch.push_back({.tokens = s.tokens, .start_pos = s.start_pos, .block_table = s.block_table,
                     .slot_mapping = s.slot_mapping, .want_logits = s.sample, .rope_offset = s.rope_offset,
                     .all_logits = s.prompt_logprobs});
  }
  if (Status vb = validate_batch(pool, backend_.capabilities(), vocab, batch); !vb.ok()) {
    return make_error(vb.error().code, "step " + std::to_string(plan.step_id) + ": " + vb.error().message);
  }

  // 1b. K/V offload spills: read the evicted pages before anything below writes.
  if (!plan.spills.empty()) st.offload->spill(backend_, plan.spills);
  // 2-4. Apply: releases, page copies, reloads, fills.
  for (uint64_t id : plan.released) {
    st.samplers.erase(id);
    st.h2o.erase(id);
    st.blend.reused.erase(id);
  }
  for (const PageCopy& c : plan.copies) TS_TRY(backend_.copy_page(c.src, c.dst));
  StepResult result;
  result.step_id = plan.step_id;
  for (const KvReload& r : plan.reloads) {
    auto rr = st.offload->reload(backend_, r);
    if (!rr.ok()) {
      return make_error(rr.error().code, "step " + std::to_string(plan.step_id) + ": reload for request " +
                                             std::to_string(r.request_id) + ": " + rr.error().message);
    }
    result.reloads.push_back(*rr);
  }
  for (size_t i = 0; i < plan.fills.size(); ++i) {
    auto fr = st.fill_handler(plan.fills[i]);
    if (!fr.ok()) {
      return make_error(fr.error().code, "step " + std::to_string(plan.step_id) + ": fills[" + std::to_string(i) + "] (request " +
                                             std::to_string(plan.fills[i].request_id) + "): " + fr.error().message);
    }
    result.fills.push_back(std::move(fr).value());
  }
  // 4b. K/V policy: compaction moves, then the H2O statistic's slots for this step's tokens.
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const SeqPlan& s = plan.seqs[i];
    if (!uses_kv_policy(s)) continue;
    H2oState* h2o = s.h2o_recent >= 0 ? &st.h2o[s.request_id] : nullptr;
    if (Status ms = apply_moves(backend_, backend_.model().config(), s, h2o); !ms.ok()) {
      return make_error(ms.error().code, "step " + std::to_string(plan.step_id) + ": request " +
                                             std::to_string(s.request_id) + ": moves: " + ms.error().message);
    }
    if (h2o != nullptr) {
      h2o->begin_step(s);
      batch[i].key_mass = h2o->mass.data();
    }
  }

  // 4c. CacheBlend prefills (blend_step.cpp), each on its own; their logits rows come after the
  // forward's. They leave the ragged batch.
  BlendRows& blended = st.blend;
  TS_TRY(run_blends(backend_, plan, batch, &blended));

  // 5. The forward: device argmax when every sampled row is plain greedy and the backend can.
  const bool device_greedy = n_sampled > 0 && all_greedy && blended.ids.empty() && backend_.capabilities().greedy == Where::kDevice;
  std::span<float> logits;
  std::vector<int32_t> greedy_tokens;
  if (device_greedy) {
    TS_ASSIGN_OR_RETURN(greedy_tokens, backend_.forward_argmax(batch));
  } else if (!batch.empty() || !plan.copies.empty()) {
    TS_ASSIGN_OR_RETURN(logits, backend_.forward(batch));  // an empty batch waits for the copies
  }
  if (!blended.ids.empty()) logits = blended.append_to(logits);

  // Rows of the returned logits: a sequence with all_logits has one per token (the last is the
  // one sampled), any other sequence with want_logits one.
  std::vector<size_t> sample_rows;  // per sampled sequence, its row
  if (!device_greedy) {
    size_t row = 0;
    size_t blend_row = logits.size() / static_cast<size_t>(vocab) - blended.ids.size();
    for (const SeqPlan& s : plan.seqs) {
      if (!s.blend_chunks.empty()) {
        if (s.sample) sample_rows.push_back(blend_row++);
      } else if (s.prompt_logprobs) {
        TS_CHECK_LE((row + s.tokens.size()) * static_cast<size_t>(vocab), logits.size());
        result.prompt_logprobs.push_back(score_prompt(s, logits.subspan(row * static_cast<size_t>(vocab)), vocab));
        row += s.tokens.size();
        if (s.sample) sample_rows.push_back(row - 1);
      } else if (s.sample) {
        sample_rows.push_back(row++);
      }
    }
  }

  // 6. Sampling: request states are created (map changes) on this thread, then every sequence
  // samples its own row, in parallel on the backend's host threads when it lends them (Samplers
  // are independent; each row is its own slice of the step's logits, penalized in place). A
  // full-vocabulary sort per sequence (temperature sampling) is milliseconds each.
  struct Pick {
    uint64_t request_id;
    Sampler* sampler;
    SampleOutcome out;
  };
  std::vector<Pick> picks;
  picks.reserve(n_sampled);
  for (const SeqPlan& s : plan.seqs) {
    if (!s.sample) continue;
    auto& slot = st.samplers[s.request_id];
    if (!slot) {
      const auto g = new_grammars.find(s.request_id);
      slot = g == new_grammars.end() ? std::make_unique<Sampler>(s.sampling)
                                     : std::make_unique<Sampler>(s.sampling, g->second, st.grammar_vocab.get());
      slot->set_history(s.generated);
    }
    picks.push_back({.request_id = s.request_id, .sampler = slot.get(), .out = {}});
  }
  if (device_greedy) {
    for (size_t i = 0; i < picks.size(); ++i) {
      picks[i].out.token = greedy_tokens.at(i);
      picks[i].sampler->accept(picks[i].out.token);
    }
  } else if (!picks.empty()) {
    const size_t v = static_cast<size_t>(vocab);
    TS_CHECK(sample_rows.size() == picks.size()) << sample_rows.size() << " rows for " << picks.size() << " samples";
    TS_CHECK(logits.size() >= (sample_rows.back() + 1) * v) << logits.size() << " logits for " << picks.size() << " rows";
    float* rows = logits.data();  // the sampler penalizes each row in place (backend.h allows it)
    Pick* pick_list = picks.data();
    const size_t* row_of = sample_rows.data();
    auto sample_row = [pick_list, rows, v, row_of](int64_t i) {
      Pick& p = pick_list[i];
      p.out = p.sampler->sample({rows + row_of[i] * v, v});
      p.sampler->accept(p.out.token);
    };
    kernels::ThreadPool* tp = backend_.host_threads();
    if (picks.size() > 1 && tp != nullptr) {
      tp->parallel_for(static_cast<int64_t>(picks.size()), sample_row);
    } else {
      for (size_t i = 0; i < picks.size(); ++i) sample_row(static_cast<int64_t>(i));
    }
  }

  // 7. The result (H2O victims from the statistic after this step's attention).
  size_t pick = 0;
  for (const SeqPlan& s : plan.seqs) {
    if (!s.sample) continue;
    Pick& p = picks[pick++];
    std::vector<int32_t> victims;
    if (s.h2o_recent >= 0) victims = st.h2o[s.request_id].victims(s);
    result.results.push_back({.request_id = p.request_id, .token = p.out.token, .logprob = p.out.logprob,
                              .top = std::move(p.out.top), .victims = std::move(victims),
                              .reused_tokens = blended.take_reused(s.request_id)});
  }
  if (st.offload != nullptr) result.offloaded = st.offload->take_offloaded();
  result.compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace tessera::worker
