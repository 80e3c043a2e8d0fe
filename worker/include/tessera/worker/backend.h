// The worker's backend table: the math a StepExecutor (step_executor.h) needs from a device,
// in the spirit of ggml's backend interface (a small set of entry points plus capabilities
// that say what the backend can do, so that the caller refuses what it cannot before running).
//
// A Backend owns the weights on its device and the physical K/V page pool (DESIGN.md, K/V data
// model) and computes; everything else about a step plan — validation, releases, the order of
// copies / fills / forward, per-request sampling state, result assembly — is the executor's.
// Implementations: the CPU engine (engine.h, "cpu"), the CUDA engine on one GPU ("cuda") and
// tensor-parallel on a node's GPUs ("cuda-tp") (cuda_backend.h).
//
// Contract for every entry point:
// - inputs were validated by the executor (validate_batch below: token ids, page ids, slot
//   mapping, the limits in BackendCaps); a backend may TS_CHECK them but need not re-check;
// - errors cross this interface as Result/Status (device failures: kInternal naming the call);
// - a batch's logits/tokens come back in batch order, one row per SeqInput with want_logits.
//
// Threads: one caller at a time (the executor's thread); a backend may run its own threads
// inside a call (CPU thread pool, one thread per tensor-parallel rank).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"
#include "tessera/worker/blend.h"

namespace tessera {
class Model;  // tessera/model/model.h
}

namespace tessera::kernels {
class ThreadPool;
}

namespace tessera::worker {

// One sequence of a forward batch. Spans must stay valid during the call.
struct SeqInput {
  std::span<const int32_t> tokens;        // >= 1 token ids in [0, vocab)
  int32_t start_pos = 0;                  // position of tokens[0]
  std::span<const int32_t> block_table;   // pages covering positions [0, start_pos + tokens.size())
  std::span<const int64_t> slot_mapping;  // per token: block_table[p / ps] * ps + p % ps, p = start_pos + i
  bool want_logits = false;               // logits of the last token
  // K/V policies (docs/kv.md). start_pos / slot_mapping are cache indices; the RoPE position of
  // tokens[i] is start_pos + i + rope_offset. key_mass, when set, has start_pos + tokens.size()
  // floats: the backend adds every query row's attention probabilities (summed over heads and
  // layers) to the entry of each cache index it attends (H2O's heavy-hitter statistic).
  int32_t rope_offset = 0;
  float* key_mass = nullptr;
  // Logits of every token of this sequence (one row per token, in order; replaces want_logits'
  // single row). Only with capabilities().prompt_logprobs (prompt log-probabilities).
  bool all_logits = false;
};

// The page pool as the scheduler sees it: num_pages pages of page_size tokens, for n_layers
// layers of n_kv_heads x head_dim K and V values (a slot is page * page_size + offset).
struct PoolGeometry {
  int32_t num_pages = 0;
  int32_t page_size = 0;
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  // 2: a K and a V row per token and head; 1: one row read as both (the MLA latent cache), so
  // read_kv's v is a copy of k and write_kv ignores v.
  int32_t planes = 2;
  int64_t token_floats() const { return static_cast<int64_t>(n_kv_heads) * head_dim; }
};

// Where a sampling option runs: not at all, on the host (from logits the backend copied back),
// or on the device.
enum class Where : uint8_t { kNone, kHost, kDevice };
const char* where_name(Where w);

// What a backend can do. The executor refuses a plan that needs something missing with
// kUnsupported naming the capability (capability names below, as in the worker's register).
struct BackendCaps {
  // "kv_fill": read_kv/write_kv work, so KvFill directives (preference K/V injection) can run.
  bool kv_fill = false;
  // read_kv/write_kv move the pool's rows as stored (geometry()'s heads: per-head K and V, or the
  // one latent row of a multi-head latent attention cache), so K/V offload can spill and reload
  // pages. Implied by kv_fill; set without it for a latent cache. Not advertised (a local check).
  bool kv_pages = false;
  // "kv_policy" (with kv_fill): SeqInput::rope_offset and key_mass work, so StreamingLLM and
  // H2O plans (moves through read_kv/write_kv, re-based RoPE, attention mass) can run.
  bool kv_scores = false;
  // Sampling options. "greedy": temperature 0 or top_k 1 without penalties or logprobs (kDevice:
  // forward_argmax, no logits copy); "temperature" (temperature > 0), "top_k" (> 1), "top_p"
  // (< 1), "min_p" (> 0), "penalties" (repetition/presence/frequency), "logprobs" (logprobs or
  // top_logprobs).
  Where greedy = Where::kHost;
  Where temperature = Where::kHost;
  Where top_k = Where::kHost;
  Where top_p = Where::kHost;
  Where min_p = Where::kHost;
  Where penalties = Where::kHost;
  Where logprobs = Where::kHost;
  // "prompt_logprobs": forward() honours SeqInput::all_logits (the log-probabilities of prompt
  // tokens, OpenAI echo + logprobs).
  bool prompt_logprobs = false;
  // "chunk_blend": blend_prefill works (CacheBlend, blend.h).
  bool chunk_blend = false;
  // Limits of one forward (0 = none beyond the executor's own): sequences, tokens, positions
  // per sequence; max_head_dim is informational (the backend refused larger models at creation).
  int32_t max_seqs = 0;
  int32_t max_batch_tokens = 0;
  int32_t max_context = 0;
  int32_t max_head_dim = 0;
};

// The capability names a worker advertises (protocol RegisterWorker::capabilities): the
// backend's name first, then every supported capability ("kv_fill", "greedy", ...).
std::vector<std::string> capability_names(std::string_view backend_name, const BackendCaps& caps);

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "cpu", "cuda", "cuda-tp"
  virtual const Model& model() const = 0;     // the whole model (not a tensor-parallel shard)
  virtual PoolGeometry geometry() const = 0;  // fixed for the backend's life
  virtual BackendCaps capabilities() const = 0;

  // Runs one validated ragged batch into the pool (every token's K/V to its slot) and returns
  // the logits of the sequences with want_logits (every token's row for all_logits), [count, vocab] row-major in host memory the
  // backend owns: valid until its next call, and the caller may modify the rows in place (the
  // executor's samplers apply penalties there). An empty batch computes nothing (but waits for
  // enqueued page copies).
  virtual Result<std::span<float>> forward(std::span<const SeqInput> batch) = 0;
  // As forward, but returns only the argmax (lowest id on ties) of each want_logits row, computed
  // on the device. Only when capabilities().greedy == kDevice; kUnsupported otherwise.
  virtual Result<std::vector<int32_t>> forward_argmax(std::span<const SeqInput> batch);

  // Copies page src to page dst in every layer (copy-on-write). Both in range.
  virtual Status copy_page(int32_t src, int32_t dst) = 0;
  // K and V of `slots` in layer l as f32, token_floats() values per slot, row after row
  // (k.size() == v.size() == slots.size() * token_floats()). Only with capabilities().kv_fill.
  // A multi-head latent attention cache (geometry: one head of the latent row) reads v as a
  // copy of k and ignores v on write.
  virtual Status read_kv(int32_t layer, std::span<const int64_t> slots, std::span<float> k, std::span<float> v);
  virtual Status write_kv(int32_t layer, std::span<const int64_t> slots, std::span<const float> k,
                          std::span<const float> v);

  // CacheBlend: one sequence's prompt prefill reusing cached chunk K/V (blend.h). Only with
  // capabilities().chunk_blend; kUnsupported otherwise. Errors name the field (kInvalidArgument).
  virtual Result<BlendOutcome> blend_prefill(const BlendInput& in);
  virtual BlendStats blend_stats() const { return {}; }

  // Host threads the executor may borrow for per-row sampling (nullptr: sample serially).
  virtual kernels::ThreadPool* host_threads() { return nullptr; }
};

// The executor's input checks of one batch against a backend (no side effects): token ids in
// [0, vocab), positions, block tables covering them with pages of the pool, slot mappings that
// agree with the block tables, and the BackendCaps limits. Errors (kInvalidArgument,
// kOutOfRange, kTooLarge) name the sequence ("seq 3") and the field.
Status validate_batch(const PoolGeometry& pool, const BackendCaps& caps, int32_t vocab_size,
                      std::span<const SeqInput> batch);

}  // namespace tessera::worker
