// The sim backend (sim_backend.h): chained per-slot states instead of K/V, a cost model instead
// of math.
#include "tessera/worker/sim_backend.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "tessera/common/check.h"
#include "tessera/model/model.h"

namespace tessera::worker {
namespace {

// SplitMix64's finalizer: every input bit reaches every output bit.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace

double SimCost::seconds(std::span<const SeqInput> batch) const {
  if (batch.empty()) return 0.0;
  double prefill_tokens = 0.0, decode_seqs = 0.0, context = 0.0, pairs = 0.0;
  for (const SeqInput& s : batch) {
    const auto n = static_cast<double>(s.tokens.size());
    if (s.tokens.size() > 1) {
      prefill_tokens += n;
      pairs += n * static_cast<double>(s.start_pos) + n * (n + 1.0) / 2.0;
    } else {
      decode_seqs += 1.0;
    }
    context += static_cast<double>(s.start_pos) + n;
  }
  return (step_us + prefill_token_us * prefill_tokens + decode_seq_us * decode_seqs + kv_token_us * context +
          prefill_pair_us * pairs) *
         1e-6;
}

std::string SimCost::to_string() const {
  return "step_us=" + fmt(step_us) + " prefill_token_us=" + fmt(prefill_token_us) +
         " decode_seq_us=" + fmt(decode_seq_us) + " kv_token_us=" + fmt(kv_token_us) +
         " prefill_pair_us=" + fmt(prefill_pair_us);
}

Result<SimCost> sim_profile(std::string_view name) {
  // Fitted exactly to TensorRT-LLM 0.5.0's published H100 FP8 LLaMA-7B throughputs (static
  // batching; four rows, four unknowns): docs/simulation.md.
  if (name == "h100-llama2-7b") {
    return SimCost{.step_us = 4487.0, .prefill_token_us = 13.16, .decode_seq_us = 7.65, .kv_token_us = 0.0936};
  }
  // Fitted to engine_bench on stories260K, 1 thread, on the build machine: docs/simulation.md.
  if (name == "cpu-stories260k") {
    return SimCost{.step_us = 9.02, .prefill_token_us = 16.35, .decode_seq_us = 18.11, .kv_token_us = 0.673,
                   .prefill_pair_us = 0.5285};
  }
  return make_error(ErrorCode::kInvalidArgument,
                    "--sim-profile must be h100-llama2-7b or cpu-stories260k (got '" + std::string(name) + "')");
}

Result<SimCost> parse_sim_cost(std::string_view text) {
  std::vector<double> v;
  size_t at = 0;
  while (at <= text.size() && v.size() < 6) {
    size_t comma = text.find(',', at);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view field = text.substr(at, comma - at);
    double x = 0.0;
    const auto r = std::from_chars(field.data(), field.data() + field.size(), x);
    if (field.empty() || r.ec != std::errc() || r.ptr != field.data() + field.size() || !(x >= 0.0)) {
      return make_error(ErrorCode::kInvalidArgument, "--sim-cost: field " + std::to_string(v.size() + 1) + " ('" +
                                                         std::string(field) + "') is not a non-negative number");
    }
    v.push_back(x);
    at = comma + 1;
  }
  if (v.size() != 4 && v.size() != 5) {
    return make_error(ErrorCode::kInvalidArgument, "--sim-cost must be four or five comma-separated microsecond figures "
                                                   "STEP,PREFILL_TOKEN,DECODE_SEQ,KV_TOKEN[,PREFILL_PAIR] (got '" +
                                                       std::string(text) + "')");
  }
  return SimCost{.step_us = v[0], .prefill_token_us = v[1], .decode_seq_us = v[2], .kv_token_us = v[3],
                 .prefill_pair_us = v.size() == 5 ? v[4] : 0.0};
}

uint64_t sim_chain(uint64_t prev_state, int32_t token, int32_t position) {
  const uint64_t tp = (static_cast<uint64_t>(static_cast<uint32_t>(token)) << 32) | static_cast<uint32_t>(position);
  return mix64(prev_state ^ mix64(tp + 0x9e3779b97f4a7c15ULL));
}

int32_t sim_token(uint64_t state, int32_t vocab_size, int32_t eos) {
  TS_CHECK(vocab_size > 4) << "sim_token: vocabulary of " << vocab_size << " tokens";
  const bool skip = eos >= 3 && eos < vocab_size;
  const auto range = static_cast<uint64_t>(vocab_size - 3 - (skip ? 1 : 0));
  auto t = static_cast<int32_t>(3 + mix64(state ^ 0x70c3e5ULL) % range);
  if (skip && t >= eos) ++t;
  return t;
}

std::vector<int32_t> sim_expected_tokens(std::span<const int32_t> prompt, int n, int32_t vocab_size, int32_t eos) {
  uint64_t state = kSimSeed;
  int32_t pos = 0;
  std::vector<uint64_t> states;
  for (int32_t t : prompt) states.push_back(state = sim_chain(state, t, pos++));
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    uint64_t attended = 0;
    for (uint64_t st : states) attended = sim_attend(attended, st);
    const int32_t t = sim_token(attended, vocab_size, eos);
    out.push_back(t);
    states.push_back(sim_chain(states.back(), t, pos++));
  }
  return out;
}

uint64_t sim_attend(uint64_t acc, uint64_t state) { return mix64(acc + state); }

uint64_t sim_fingerprint(uint64_t model_fingerprint) { return mix64(model_fingerprint ^ 0x73696d2d776f726bULL); }

Result<std::unique_ptr<SimBackend>> SimBackend::create(const Model& model, const SimOptions& options) {
  if (options.pool.num_pages <= 0 || options.pool.page_size <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "sim backend: --num-pages and --page-size must be positive");
  }
  if (!(options.time_scale > 0.0)) {
    return make_error(ErrorCode::kInvalidArgument, "--sim-time-scale must be > 0 (simulated seconds per real second)");
  }
  if (model.config().vocab_size <= 4) {
    return make_error(ErrorCode::kInvalidArgument, "sim backend: the model's vocabulary has " +
                                                       std::to_string(model.config().vocab_size) + " tokens (needs > 4)");
  }
  const int64_t slots = int64_t{options.pool.num_pages} * options.pool.page_size;
  if (slots > (int64_t{1} << 31)) {
    return make_error(ErrorCode::kResourceExhausted, "sim backend: " + std::to_string(slots) + " slots is too many");
  }
  return std::unique_ptr<SimBackend>(new SimBackend(model, options));
}

SimBackend::SimBackend(const Model& model, const SimOptions& options)
    : model_(model), options_(options), vocab_(model.config().vocab_size) {
  const ModelConfig& c = model.config();
  geometry_ = PoolGeometry{.num_pages = options.pool.num_pages, .page_size = options.pool.page_size,
                           .n_layers = c.n_layers, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim};
  states_.assign(static_cast<size_t>(options.pool.num_pages) * static_cast<size_t>(options.pool.page_size), 0);
}

BackendCaps SimBackend::capabilities() const {
  BackendCaps caps;
  caps.kv_fill = false;
  caps.greedy = Where::kDevice;
  caps.max_context = model_.config().max_seq_len;
  return caps;
}

std::vector<int32_t> SimBackend::run(std::span<const SeqInput> batch) {
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t ps = geometry_.page_size;
  std::vector<int32_t> sampled;
  for (const SeqInput& s : batch) {
    uint64_t state = kSimSeed;
    if (s.start_pos > 0) {  // the previous position's state, through the block table (validated)
      const int32_t p = s.start_pos - 1;
      state = states_[static_cast<size_t>(s.block_table[static_cast<size_t>(p / ps)]) * static_cast<size_t>(ps) +
                      static_cast<size_t>(p % ps)];
    }
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      state = sim_chain(state, s.tokens[i], s.start_pos + static_cast<int32_t>(i));
      states_[static_cast<size_t>(s.slot_mapping[i])] = state;
    }
    if (s.want_logits) {
      // "Attention": every position's state, read through the block table.
      const int32_t last = s.start_pos + static_cast<int32_t>(s.tokens.size()) - 1;
      uint64_t attended = 0;
      for (int32_t q = 0; q <= last; ++q) {
        attended = sim_attend(attended, states_[static_cast<size_t>(s.block_table[static_cast<size_t>(q / ps)]) *
                                                     static_cast<size_t>(ps) +
                                                 static_cast<size_t>(q % ps)]);
      }
      sampled.push_back(sim_token(attended, vocab_, options_.eos));
    }
  }
  const double sim_s = options_.cost.seconds(batch);
  simulated_s_ += sim_s;
  ++forwards_;
  if (sim_s > 0.0) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                           std::chrono::duration<double>(sim_s / options_.time_scale)));
  }
  return sampled;
}

Result<std::span<float>> SimBackend::forward(std::span<const SeqInput> batch) {
  const std::vector<int32_t> tokens = run(batch);
  logits_.assign(tokens.size() * static_cast<size_t>(vocab_), 0.0f);
  const auto v = static_cast<size_t>(vocab_);
  for (size_t r = 0; r < tokens.size(); ++r) logits_[r * v + static_cast<size_t>(tokens[r])] = kSimLogit;
  return std::span<float>(logits_);
}

Result<std::vector<int32_t>> SimBackend::forward_argmax(std::span<const SeqInput> batch) { return run(batch); }

Status SimBackend::copy_page(int32_t src, int32_t dst) {
  const auto ps = static_cast<size_t>(geometry_.page_size);
  std::copy_n(states_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(src) * ps), ps,
              states_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(dst) * ps));
  return ok_status();
}

}  // namespace tessera::worker
