// The CPU engine: a CpuBackend (the paged forward pass on this machine's cores) and the
// StepExecutor that runs step plans over it (backend.h, step_executor.h), behind one owner.
//
// Engine::forward runs one ragged batch: each sequence brings its tokens (a prefill chunk or
// a single decode token), the position of its first token, its block table and its slot
// mapping (where each token's K/V goes). For every layer the K/V of all the batch's tokens are
// written to their slots first, then each query attends over positions [0, its position]
// through its block table; one step may mix prefill chunks and decode tokens. Logits are
// computed only for the last token of sequences that ask for them.
//
// Engine::execute is StepExecutor::execute (validate everything first; then releases, page
// copies, fills, the forward, then sampling with per-request sampler state that lives until
// the request id appears in plan.released). A plan that fails validation changes nothing.
//
// reference_forward is the deliberately simple oracle: one sequence, contiguous K/V, plain
// loops, f32 math over dequantized weights (activations are never quantized).
//
// Ownership and threads: the Engine borrows the Model (which must outlive it) and owns its
// backend (KvPool, scratch buffers, thread pool) and executor. Not thread-safe: one caller at
// a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"
#include "tessera/kernels/isa.h"
#include "tessera/worker/backend.h"
#include "tessera/worker/kv_pool.h"
#include "tessera/model/model.h"

namespace tessera::worker {

struct EngineOptions {
  PoolConfig pool;
  int32_t threads = 0;               // 0 = std::thread::hardware_concurrency()
  std::optional<kernels::Isa> isa;   // kernel path; default kernels::detect_isa()
  BlendConfig blend;                 // CacheBlend (blend.h): Backend::blend_prefill
  // Multi-head latent attention over the latent cache: a sequence with at least this many rows
  // in a step (a prefill chunk) attends over per-head K/V expanded from its latent rows, fewer
  // rows (decode) take the absorbed form (docs/models.md). 0 = the measured default; >= 0.
  int32_t mla_expand_rows = 0;
  // Repack the dense matmul weights at create() into the kernels' 16-row interleaved layout
  // (kernels/packed_weights.h; Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL on the AVX-512 path), dropping
  // the mmap'ed originals' pages it no longer reads. Results are bit-identical either way.
  bool weight_repack = true;
};

class StepExecutor;

class Engine {
 public:
  // Checks the model (shapes, dtypes the kernels support) and allocates the pool.
  static Result<std::unique_ptr<Engine>> create(const Model& model, const EngineOptions& options);
  ~Engine();

  // Returns the logits of the sequences with want_logits, [count, vocab] row-major in batch
  // order; the view is valid until the next forward()/execute(). Bad input (token ids, page
  // ids, inconsistent slot mapping) gives kInvalidArgument/kOutOfRange and writes nothing.
  Result<std::span<const float>> forward(std::span<const SeqInput> batch);

  // Executes a step plan. Errors name the sequence and field; nothing is applied then.
  // KvFill directives need a fill handler (kUnsupported without one).
  Result<StepResult> execute(const StepPlan& plan);

  // Executes KvFill directives (preference injection: worker/preference.h installs one). Called
  // by execute() once per fill, after the page copies and before the forward, with the fill's
  // page ids already checked against the pool; its FillResult goes to StepResult::fills. A
  // handler error fails the step (the copies are already applied; the fill's pages are then
  // undefined and the scheduler fails the request).
  using FillHandler = std::function<Result<FillResult>(Engine&, const KvFill&)>;
  void set_fill_handler(FillHandler handler);

  const Model& model() const;
  KvPool& pool();
  Backend& backend();         // the CpuBackend ("cpu")
  StepExecutor& executor();   // runs execute(); what the worker service drives
  int32_t threads() const;
  kernels::Isa isa() const;
  size_t num_request_states() const;  // requests with live sampler state
  // Forgets every per-request state (sampler states), as if every live request id had been
  // released. For a worker whose scheduler lost track of it (it registers again, and a restarted
  // scheduler numbers requests from 1 again). K/V pool contents are the scheduler's business.
  void reset_requests();

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One sequence generated through Engine::execute (the paged path): a prefill step, then one
// decode step per token, on pages [0, ceil((P + prompt + max_tokens) / page_size)) of the pool,
// as request id `request_id` (released at the end). With a `fill` (preference K/V injection;
// the engine needs a fill handler), step 0 also carries it, on pages [0, ceil(P / page_size)),
// and the prompt starts at position P = fill->num_tokens; otherwise P = 0. Used by `tessera generate`, tests and
// benchmarks; the serving path drives execute() from the scheduler instead.
struct GenerateRequest {
  std::span<const int32_t> prompt;       // >= 1 token
  int32_t max_tokens = 16;               // new tokens at most (>= 1)
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;         // generation ends after emitting one of these
  std::function<bool(int32_t token)> on_token;  // optional; return false to stop early
  uint64_t request_id = 1;
  std::optional<KvFill> fill;            // request_id and pages are set by generate()
};

struct GenerateResult {
  std::vector<int32_t> tokens;    // generated tokens (a stop token included)
  std::vector<float> logprobs;    // per token, when sampling.logprobs
  std::vector<std::vector<TokenLogprob>> top;  // per token, when sampling.top_logprobs > 0
  bool stopped = false;           // ended on a stop id (or on_token returned false)
  double prefill_ms = 0.0;        // the prompt step (it also yields the first token)
  double decode_ms = 0.0;         // all later steps
  std::optional<FillResult> fill; // what the fill handler reported for step 0, with a fill
};

// Errors: kInvalidArgument (empty prompt, max_tokens < 1, fill->num_tokens < 1), kResourceExhausted (the pool has
// too few pages), and whatever execute() reports.
Result<GenerateResult> generate(Engine& engine, const GenerateRequest& request);

// Logits for every position of `tokens` (positions 0..n-1), [n, vocab] row-major.
// queries (optional): every layer's queries after RoPE, [n_layers][tokens][n_heads * head_dim]
// (probes of attention error on real K/V, tests/unit/kvstore).
Result<std::vector<float>> reference_forward(const Model& model, std::span<const int32_t> tokens,
                                             std::vector<float>* queries = nullptr);

}  // namespace tessera::worker
