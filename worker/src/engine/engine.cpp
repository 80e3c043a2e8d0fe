// Engine construction, input validation and the step-plan executor.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <unordered_set>

#include "engine_impl.h"
#include "tessera/common/log.h"
#include "tessera/kernels/matmul.h"

namespace tessera::worker {
namespace {

Status check_tensor(const Tensor& t, const std::string& name, int64_t rows, int64_t cols, bool f32_only) {
  if (t.empty()) return make_error(ErrorCode::kInvalidArgument, "model: tensor " + name + " is missing");
  if (t.rows != rows || t.cols != cols) {
    return make_error(ErrorCode::kInvalidArgument, "model: tensor " + name + " has shape [" + std::to_string(t.rows) + ", " +
                                                       std::to_string(t.cols) + "], expected [" + std::to_string(rows) +
                                                       ", " + std::to_string(cols) + "]");
  }
  if (f32_only && t.dtype != DType::kF32) {
    return make_error(ErrorCode::kUnsupported, "model: tensor " + name + " must be f32 (is " + dtype_name(t.dtype) + ")");
  }
  return ok_status();
}

Status check_linear(const Tensor& t, const std::string& name, int64_t rows, int64_t cols) {
  TS_TRY(check_tensor(t, name, rows, cols, false));
  if (!kernels::matmul_supports(t.dtype)) {
    return make_error(ErrorCode::kUnsupported,
                      std::string("not implemented yet: matmul with ") + dtype_name(t.dtype) + " weights (tensor " + name + ")");
  }
  return ok_status();
}

std::string seq_name(size_t i) { return "seq " + std::to_string(i); }

}  // namespace

Status check_model(const Model& model) {
  const ModelConfig& c = model.config();
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 ||
      c.vocab_size <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "model: config has a non-positive dimension");
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return make_error(ErrorCode::kInvalidArgument, "model: n_heads " + std::to_string(c.n_heads) +
                                                       " is not a multiple of n_kv_heads " + std::to_string(c.n_kv_heads));
  }
  if (c.head_dim % 2 != 0) return make_error(ErrorCode::kInvalidArgument, "model: head_dim must be even for RoPE");
  if (static_cast<int32_t>(model.layers.size()) != c.n_layers) {
    return make_error(ErrorCode::kInvalidArgument, "model: " + std::to_string(model.layers.size()) + " layers, config says " +
                                                       std::to_string(c.n_layers));
  }
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim, kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  TS_TRY(check_tensor(model.tok_embeddings, "token_embd", c.vocab_size, c.dim, false));
  TS_TRY(check_tensor(model.final_norm, "output_norm", 1, c.dim, true));
  TS_TRY(check_linear(model.output, "output", c.vocab_size, c.dim));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model.layers[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    TS_TRY(check_tensor(w.attn_norm, p + "attn_norm", 1, c.dim, true));
    TS_TRY(check_tensor(w.ffn_norm, p + "ffn_norm", 1, c.dim, true));
    TS_TRY(check_linear(w.wq, p + "attn_q", q_dim, c.dim));
    TS_TRY(check_linear(w.wk, p + "attn_k", kv_dim, c.dim));
    TS_TRY(check_linear(w.wv, p + "attn_v", kv_dim, c.dim));
    TS_TRY(check_linear(w.wo, p + "attn_output", c.dim, q_dim));
    TS_TRY(check_linear(w.w_gate, p + "ffn_gate", c.hidden_dim, c.dim));
    TS_TRY(check_linear(w.w_up, p + "ffn_up", c.hidden_dim, c.dim));
    TS_TRY(check_linear(w.w_down, p + "ffn_down", c.dim, c.hidden_dim));
    if (c.attn_bias) {
      TS_TRY(check_tensor(w.bq, p + "attn_q.bias", 1, q_dim, true));
      TS_TRY(check_tensor(w.bk, p + "attn_k.bias", 1, kv_dim, true));
      TS_TRY(check_tensor(w.bv, p + "attn_v.bias", 1, kv_dim, true));
    }
  }
  return ok_status();
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, const EngineOptions& options) {
  TS_TRY(check_model(model));
  const kernels::Isa isa = options.isa.value_or(kernels::detect_isa());
  if (!kernels::isa_supported(isa)) {
    return make_error(ErrorCode::kUnsupported, std::string("engine: kernel path ") + kernels::isa_name(isa) +
                                                   " is not supported by this CPU");
  }
  int32_t threads = options.threads;
  if (threads < 0 || threads > 1024) {
    return make_error(ErrorCode::kInvalidArgument, "engine: threads must be in [0, 1024] (got " + std::to_string(threads) + ")");
  }
  if (threads == 0) threads = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  TS_ASSIGN_OR_RETURN(KvPool pool, KvPool::create(model.config(), options.pool));
  auto impl = std::make_unique<Impl>(model, std::move(pool), isa, threads);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const Model& Engine::model() const { return impl_->model; }
KvPool& Engine::pool() { return impl_->pool; }
int32_t Engine::threads() const { return impl_->threads->size(); }
kernels::Isa Engine::isa() const { return impl_->isa; }
size_t Engine::num_request_states() const { return impl_->samplers.size(); }
void Engine::reset_requests() { impl_->samplers.clear(); }
void Engine::set_fill_handler(FillHandler handler) { impl_->fill_handler = std::move(handler); }

Status Engine::Impl::validate(std::span<const SeqInput> batch) const {
  const int32_t ps = pool.page_size();
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqInput& in = batch[i];
    if (in.tokens.empty()) return make_error(ErrorCode::kInvalidArgument, seq_name(i) + ": no tokens");
    if (in.tokens.size() > (1u << 24)) return make_error(ErrorCode::kTooLarge, seq_name(i) + ": too many tokens in one step");
    if (in.start_pos < 0 || static_cast<int64_t>(in.start_pos) + static_cast<int64_t>(in.tokens.size()) > (int64_t{1} << 30)) {
      return make_error(ErrorCode::kOutOfRange, seq_name(i) + ": start_pos " + std::to_string(in.start_pos) + " out of range");
    }
    for (size_t t = 0; t < in.tokens.size(); ++t) {
      if (in.tokens[t] < 0 || in.tokens[t] >= cfg.vocab_size) {
        return make_error(ErrorCode::kOutOfRange, seq_name(i) + ": token " + std::to_string(in.tokens[t]) + " at index " +
                                                      std::to_string(t) + " is outside the vocabulary [0, " +
                                                      std::to_string(cfg.vocab_size) + ")");
      }
    }
    const int64_t end = static_cast<int64_t>(in.start_pos) + static_cast<int64_t>(in.tokens.size());
    const int64_t pages_needed = (end + ps - 1) / ps;
    if (static_cast<int64_t>(in.block_table.size()) < pages_needed) {
      return make_error(ErrorCode::kInvalidArgument, seq_name(i) + ": block_table has " + std::to_string(in.block_table.size()) +
                                                         " pages, positions [0, " + std::to_string(end) + ") need " +
                                                         std::to_string(pages_needed));
    }
    for (int64_t p = 0; p < pages_needed; ++p) {
      const int32_t page = in.block_table[static_cast<size_t>(p)];
      if (page < 0 || page >= pool.num_pages()) {
        return make_error(ErrorCode::kOutOfRange, seq_name(i) + ": block_table[" + std::to_string(p) + "] = " +
                                                      std::to_string(page) + " is not a page of the pool [0, " +
                                                      std::to_string(pool.num_pages()) + ")");
      }
    }
    if (in.slot_mapping.size() != in.tokens.size()) {
      return make_error(ErrorCode::kInvalidArgument, seq_name(i) + ": slot_mapping has " + std::to_string(in.slot_mapping.size()) +
                                                         " entries for " + std::to_string(in.tokens.size()) + " tokens");
    }
    for (size_t t = 0; t < in.tokens.size(); ++t) {
      const int64_t p = in.start_pos + static_cast<int64_t>(t);
      const int64_t want = static_cast<int64_t>(in.block_table[static_cast<size_t>(p / ps)]) * ps + p % ps;
      if (in.slot_mapping[t] != want) {
        return make_error(ErrorCode::kInvalidArgument, seq_name(i) + ": slot_mapping[" + std::to_string(t) + "] = " +
                                                           std::to_string(in.slot_mapping[t]) + " but block_table puts position " +
                                                           std::to_string(p) + " in slot " + std::to_string(want));
      }
    }
  }
  return ok_status();
}

Result<std::span<const float>> Engine::forward(std::span<const SeqInput> batch) {
  TS_TRY(impl_->validate(batch));
  return impl_->run(batch);
}

Result<StepResult> Engine::execute(const StepPlan& plan) {
  const auto t0 = std::chrono::steady_clock::now();
  Impl& im = *impl_;
  // 1. Validate the whole plan before touching anything.
  if (!plan.fills.empty() && !im.fill_handler) {
    // The message keeps the wording tests/unit/worker_engine checks for a bare Engine.
    return make_error(ErrorCode::kUnsupported, "not implemented yet: kvstore fill (preference K/V injection) without a fill "
                                               "handler (PreferenceInjector::attach), step " + std::to_string(plan.step_id));
  }
  for (size_t i = 0; i < plan.fills.size(); ++i) {
    for (int32_t page : plan.fills[i].pages) {
      if (page < 0 || page >= im.pool.num_pages()) {
        return make_error(ErrorCode::kOutOfRange, "fills[" + std::to_string(i) + "]: page " + std::to_string(page) +
                                                      " outside the pool [0, " + std::to_string(im.pool.num_pages()) + ")");
      }
    }
  }
  for (size_t i = 0; i < plan.copies.size(); ++i) {
    const PageCopy& c = plan.copies[i];
    if (c.src < 0 || c.src >= im.pool.num_pages() || c.dst < 0 || c.dst >= im.pool.num_pages()) {
      return make_error(ErrorCode::kOutOfRange, "copies[" + std::to_string(i) + "]: page " + std::to_string(c.src) + " -> " +
                                                    std::to_string(c.dst) + " outside the pool [0, " +
                                                    std::to_string(im.pool.num_pages()) + ")");
    }
  }
  std::unordered_set<uint64_t> ids;
  std::vector<SeqInput> batch;
  batch.reserve(plan.seqs.size());
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const SeqPlan& s = plan.seqs[i];
    if (!ids.insert(s.request_id).second) {
      return make_error(ErrorCode::kInvalidArgument, "request " + std::to_string(s.request_id) + " appears twice in step " +
                                                         std::to_string(plan.step_id));
    }
    if (s.sample) {
      Status st = validate_sampling_params(s.sampling);
      if (!st.ok()) {
        return make_error(st.error().code, "request " + std::to_string(s.request_id) + ": " + st.error().message);
      }
      for (int32_t g : s.generated) {
        if (g < 0 || g >= im.cfg.vocab_size) {
          return make_error(ErrorCode::kOutOfRange, "request " + std::to_string(s.request_id) + ": generated token " +
                                                        std::to_string(g) + " is outside the vocabulary");
        }
      }
    }
    batch.push_back({.tokens = s.tokens, .start_pos = s.start_pos, .block_table = s.block_table,
                     .slot_mapping = s.slot_mapping, .want_logits = s.sample});
  }
  {
    Status st = im.validate(batch);
    if (!st.ok()) return make_error(st.error().code, "step " + std::to_string(plan.step_id) + ": " + st.error().message);
  }
  // 2. Apply: releases, page copies, forward, sampling.
  for (uint64_t id : plan.released) im.samplers.erase(id);
  for (const PageCopy& c : plan.copies) im.pool.copy_page(c.src, c.dst);
  StepResult result;
  result.step_id = plan.step_id;
  for (size_t i = 0; i < plan.fills.size(); ++i) {
    auto fr = im.fill_handler(*this, plan.fills[i]);
    if (!fr.ok()) {
      return make_error(fr.error().code, "step " + std::to_string(plan.step_id) + ": fills[" + std::to_string(i) + "] (request " +
                                             std::to_string(plan.fills[i].request_id) + "): " + fr.error().message);
    }
    result.fills.push_back(std::move(fr).value());
  }
  if (!batch.empty()) im.run(batch);
  // Sampling: request states are created (map changes) on this thread, then every sequence
  // samples its own row in parallel (Samplers are independent; each row is its own slice of
  // the step's logits, penalized in place). A full-vocabulary sort per sequence (temperature
  // sampling) is milliseconds each; serially it was a large share of a 32-sequence step.
  struct Pick {
    uint64_t request_id;
    Sampler* sampler;
    SampleOutcome out;
  };
  std::vector<Pick> picks;
  for (const SeqPlan& s : plan.seqs) {
    if (!s.sample) continue;
    auto& slot = im.samplers[s.request_id];
    if (!slot) {
      slot = std::make_unique<Sampler>(s.sampling);
      slot->set_history(s.generated);
    }
    picks.push_back({.request_id = s.request_id, .sampler = slot.get(), .out = {}});
  }
  const size_t vocab = static_cast<size_t>(im.cfg.vocab_size);
  float* logits = im.s.logits.data();  // run() wrote one row per sampled sequence, in plan order
  Pick* pick_list = picks.data();
  auto sample_row = [pick_list, logits, vocab](int64_t i) {
    Pick& p = pick_list[i];
    p.out = p.sampler->sample({logits + static_cast<size_t>(i) * vocab, vocab});
    p.sampler->accept(p.out.token);
  };
  if (picks.size() > 1) {
    im.threads->parallel_for(static_cast<int64_t>(picks.size()), sample_row);
  } else if (picks.size() == 1) {
    sample_row(0);
  }
  for (Pick& p : picks) {
    result.results.push_back(
        {.request_id = p.request_id, .token = p.out.token, .logprob = p.out.logprob, .top = std::move(p.out.top)});
  }
  result.compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace tessera::worker
