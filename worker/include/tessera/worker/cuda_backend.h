// The CUDA backends of the worker: Backend implementations (backend.h) on one GPU ("cuda",
// CudaEngine) or on a node's GPUs with tensor parallelism ("cuda-tp", CudaTpEngine), each owned
// with its StepExecutor (step_executor.h), which does validation, releases, copies and
// sampling exactly as for the CPU Engine (engine.h): forward() over a ragged batch through block
// tables and slot mappings, execute() of a StepPlan.
//
// On the device (per rank):
// - weights in the chosen 16-bit type (options.dtype): F32/F16/BF16 are converted and Q8_0 is
//   dequantized once at upload; Q/K/V and gate/up are fused into one GEMM each; norms and
//   biases stay f32. GEMMs are cuBLAS (cublasGemmEx, 16-bit inputs, f32 accumulate and output).
// - the page pool [n_layers][num_pages, 2, page_size, n_kv_heads, head_dim] in the same 16-bit
//   type, sized from options.memory_fraction of the device's memory (or options.num_pages).
// - decode-only steps (every sequence brings one token) replay a CUDA graph captured once per
//   batch size; other steps (prefill, chunked prefill, mixed) run the kernels directly.
// Capabilities (BackendCaps): greedy on the device (a step whose sampled rows are all plain
// greedy — temperature 0 or top_k 1, no penalties, no logprobs — takes the device argmax and
// copies back only tokens); every other sampling option on the host (the executor's Sampler
// over the copied-back logits; device top-k/top-p, kernels/cuda/sampling.h, is not wired in
// yet); no kv_fill (K/V pages are not readable/writable from the host yet), so plans with
// KvFill directives are refused naming the capability; limits max_seqs, max_batch_tokens,
// max_context from the options.
//
// Errors: everything crossing this header is a Result; CUDA/cuBLAS/NCCL failures become
// kInternal naming the call, bad input kInvalidArgument/kOutOfRange naming the field (and
// nothing is written), absent GPU kUnavailable.
//
// Ownership and threads: the engine borrows the Model (which must outlive it; host weights
// are not needed after create()). One caller at a time. CudaTpEngine runs one thread per rank
// inside each call; rank 0 produces the results.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"
#include "tessera/kernels/cuda/types.h"
#include "tessera/worker/backend.h"
#include "tessera/worker/engine.h"
#include "tessera/model/model.h"
#include "tessera/worker/step_executor.h"

namespace tessera::worker {

struct CudaEngineOptions {
  int32_t device = 0;
  kernels::cuda::HalfType dtype = kernels::cuda::HalfType::kBF16;  // weights, activations, K/V
  float memory_fraction = 0.9f;  // of total device memory for weights + pool + scratch, (0, 1]
  int32_t num_pages = 0;         // > 0: exactly this many pages (memory_fraction ignored)
  int32_t page_size = 16;
  int32_t max_batch_tokens = 8192;  // tokens per forward (scratch sizing)
  int32_t max_seqs = 256;           // sequences per forward
  int32_t max_context = 0;          // positions per sequence; 0 = model max_seq_len (min 4096)
  bool cuda_graphs = true;          // decode through captured graphs
};

// Number of CUDA devices, 0 when there is no driver or no GPU (never an error).
int32_t cuda_device_count();
// The number of CUDA devices (>= 1), or kUnavailable saying why there is none:
// "no CUDA device (cudaGetDeviceCount: <the driver's error>)".
Result<int32_t> probe_cuda_devices();

class CudaEngine {
 public:
  // Uploads the weights and allocates the pool on options.device.
  static Result<std::unique_ptr<CudaEngine>> create(const Model& model, const CudaEngineOptions& options);
  ~CudaEngine();

  // As Engine::forward: logits of the sequences with want_logits, [count, vocab] row-major on
  // the host, valid until the next call.
  Result<std::span<const float>> forward(std::span<const SeqInput> batch);
  // As Engine::execute (KvFill directives: kUnsupported, capability kv_fill).
  Result<StepResult> execute(const StepPlan& plan);

  Backend& backend();        // "cuda"
  StepExecutor& executor();  // runs execute(); what the worker service drives
  const Model& model() const;
  int32_t num_pages() const;
  int32_t page_size() const;
  size_t weight_bytes() const;   // device bytes of the weights
  size_t pool_bytes() const;
  int32_t graphs_captured() const;  // decode batch sizes with a CUDA graph

  struct Impl;

 private:
  explicit CudaEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class CudaTpEngine;
};

// Tensor parallelism over devices [0, world): weights cut as in tensor_parallel.h, NCCL
// all-reduce after the attention output and MLP down projections. Needs a build with NCCL
// (TESSERA_NCCL and nccl.h found); otherwise create() returns kUnsupported.
class CudaTpEngine {
 public:
  static Result<std::unique_ptr<CudaTpEngine>> create(const Model& model, int32_t world, const CudaEngineOptions& options);
  ~CudaTpEngine();
  Result<std::span<const float>> forward(std::span<const SeqInput> batch);
  Result<StepResult> execute(const StepPlan& plan);
  Backend& backend();        // "cuda-tp": every call runs on all ranks
  StepExecutor& executor();
  int32_t world() const;

  struct Impl;

 private:
  explicit CudaTpEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::worker
