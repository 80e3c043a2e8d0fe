// The "sim" backend: a worker that computes no weights. It exists to run many workers on one
// machine (docs/simulation.md): a step takes the time a cost model says, and the answers are
// deterministic tokens a test can recompute.
//
// What is real: the page pool and everything the scheduler does to it. Each slot of the pool
// holds one 64-bit *state* instead of K and V: the state of position p of a sequence is
// sim_chain(state of p - 1, token at p, p), read from the slot the block table names for p - 1
// (where real attention reads K/V) and written to the slot mapping's slot for p. The token
// sampled after position p is sim_token(a = sim_attend(...sim_attend(0, state 0)..., state p)),
// every position's state read through the block table, as attention reads every K/V. So a
// sequence's answer depends on every token of its prefix *through the pages*: a wrong page
// shared, copied or evicted gives a wrong answer, as it would on a real model, and
// sim_expected_tokens() computes the right one from the prompt alone.
//
// Cost model (one forward, in simulated seconds; SimCost):
//   step_us + prefill_token_us * (tokens of sequences computing more than one token)
//           + decode_seq_us * (sequences computing exactly one token)
//           + kv_token_us * (sum over sequences of the context they attend to: start_pos + tokens)
//           + prefill_pair_us * (query-key pairs of prefill chunks: per token, its position + 1)
// The last term is the quadratic attention of a CPU prefill (0 for the H100 profile, where the
// published figures show none).
// The forward sleeps that long divided by time_scale (time_scale 10: simulated time runs 10x
// faster than real time). Profiles: "h100-llama2-7b" (fitted to published TensorRT-LLM figures)
// and "cpu-stories260k" (fitted to engine_bench on the build machine); docs/simulation.md gives
// the numbers and the fits.
//
// Sampling: greedy rows are answered on the "device" (forward_argmax); other rows get logits
// that are 0 everywhere but kSimLogit at the chosen token, so any sampling setting picks it
// (the probability of another token is below 1e-10 at temperature 1 over 49k tokens).
// No kv_fill (preference K/V injection is refused, naming the capability).
//
// Ownership: borrows the Model (vocabulary size, EOS, context; must outlive the backend); owns
// the state pool. Threads: one caller at a time (the executor's thread), like every Backend.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/worker/backend.h"
#include "tessera/worker/kv_pool.h"

namespace tessera::worker {

struct SimCost {
  double step_us = 0.0;           // fixed cost of one forward
  double prefill_token_us = 0.0;  // per token of a sequence computing > 1 token (prefill chunk)
  double decode_seq_us = 0.0;     // per sequence computing exactly 1 token (decode)
  double kv_token_us = 0.0;       // per context position attended (start_pos + tokens, per sequence)
  double prefill_pair_us = 0.0;   // per (query, key) pair of a prefill chunk

  // Simulated seconds of one forward over `batch` (0 for an empty batch).
  double seconds(std::span<const SeqInput> batch) const;
  std::string to_string() const;  // "step_us=... prefill_token_us=... decode_seq_us=... kv_token_us=... prefill_pair_us=..."
};

// Named profiles: "h100-llama2-7b", "cpu-stories260k". kInvalidArgument naming the choices otherwise.
Result<SimCost> sim_profile(std::string_view name);
// "STEP,PREFILL_TOKEN,DECODE_SEQ,KV_TOKEN[,PREFILL_PAIR]" in microseconds (four or five
// non-negative numbers), e.g. "4487,13.16,7.65,0.0936".
Result<SimCost> parse_sim_cost(std::string_view text);

// The deterministic model. States and tokens depend only on the tokens and positions.
inline constexpr uint64_t kSimSeed = 0x5eed0f7e55e7a000ULL;  // "state" before position 0
inline constexpr float kSimLogit = 30.0f;
uint64_t sim_chain(uint64_t prev_state, int32_t token, int32_t position);
uint64_t sim_attend(uint64_t acc, uint64_t state);
// A token in [3, vocab) other than `eos` (so generations run to max_tokens and skip llama2.c's
// <unk>/<s>/</s>). vocab must be > 4.
int32_t sim_token(uint64_t state, int32_t vocab_size, int32_t eos);
// The first `n` tokens a sim worker generates after `prompt` (every sampling setting).
std::vector<int32_t> sim_expected_tokens(std::span<const int32_t> prompt, int n, int32_t vocab_size, int32_t eos);
// The model fingerprint a sim worker registers with: differs from the real model's, so a
// scheduler never mixes sim and real workers (their answers differ).
uint64_t sim_fingerprint(uint64_t model_fingerprint);

struct SimOptions {
  PoolConfig pool;            // pages and page size (8 bytes of state per slot)
  SimCost cost;
  double time_scale = 1.0;    // simulated seconds per real second (> 0)
  int32_t eos = -1;           // never generated (-1: none)
};

class SimBackend final : public Backend {
 public:
  static Result<std::unique_ptr<SimBackend>> create(const Model& model, const SimOptions& options);

  std::string_view name() const override { return "sim"; }
  const Model& model() const override { return model_; }
  PoolGeometry geometry() const override { return geometry_; }
  BackendCaps capabilities() const override;

  Result<std::span<float>> forward(std::span<const SeqInput> batch) override;
  Result<std::vector<int32_t>> forward_argmax(std::span<const SeqInput> batch) override;
  Status copy_page(int32_t src, int32_t dst) override;

  // Totals since creation (read on the calling thread only).
  double simulated_seconds() const { return simulated_s_; }
  int64_t forwards() const { return forwards_; }
  const SimOptions& options() const { return options_; }

 private:
  SimBackend(const Model& model, const SimOptions& options);
  // Writes every token's state into the pool and returns the sampled token of each want_logits
  // row, then waits out the step's simulated time.
  std::vector<int32_t> run(std::span<const SeqInput> batch);

  const Model& model_;
  SimOptions options_;
  PoolGeometry geometry_;
  int32_t vocab_ = 0;
  std::vector<uint64_t> states_;  // [num_pages * page_size]
  std::vector<float> logits_;     // rows handed out by forward()
  double simulated_s_ = 0.0;
  int64_t forwards_ = 0;
};

}  // namespace tessera::worker
