// tessera-worker's choice of backend (--backend cpu|cuda|sim|auto) and the object that owns the
// chosen engine. The CUDA half lives in cuda/cuda_on.cpp (CUDA built) or cuda/cuda_off.cpp
// (not built); CMake compiles exactly one of them.
//
// Rules (docs/cuda.md, "Selecting the backend"):
// - cpu: the CPU Engine.
// - cuda: the CUDA engine on device 0 (tensor-parallel over devices [0, N) with
//   --tensor-parallel N); refused at start when CUDA support was not compiled in, with --kvstore
//   (the CUDA backend lacks kv_fill), or when no device answers (the message names the cause,
//   e.g. "--backend cuda: no CUDA device (cudaGetDeviceCount: ...)").
// - sim: no weights computed (tessera/worker/sim_backend.h, docs/simulation.md); refused with
//   --kvstore (no kv_fill); never chosen by auto.
// - auto: cuda when it is compiled in and a device is present, unless the configuration needs a
//   capability the CUDA backend lacks (kv_fill, for --kvstore); else cpu.
// Ownership: a ServingBackend owns its engine (which borrows the Model). Threads: created on the
// main thread, then driven by the worker service's compute thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/common/result.h"
#include "tessera/worker/engine.h"
#include "tessera/model/model.h"
#include "tessera/worker/step_executor.h"

namespace tessera::worker_app {

struct BackendOptions {
  worker::PoolConfig pool;          // pages (exactly, on every backend), page size; cpu: dtype, memory budget
  int32_t threads = 0;              // cpu: compute threads (0 = all cores)
  int32_t max_batch_tokens = 1024;  // cuda: scratch sizing (the scheduler's step budget)
  int32_t tensor_parallel = 1;      // cuda: GPUs of this node to shard over
  std::string cuda_dtype = "bf16";  // cuda: weights, activations and K/V ("bf16" or "f16")
  std::string sim_profile = "h100-llama2-7b";  // sim: cost profile (sim_backend.h)
  std::string sim_cost;                        // sim: "STEP,PREFILL,DECODE,KV" us, overrides the profile
  double sim_time_scale = 1.0;                 // sim: simulated seconds per real second
  int32_t eos = -1;                            // sim: the token never generated (main sets it)
  worker::BlendConfig blend;                   // cpu: CacheBlend (docs/kv.md); cache_bytes from blend_cache_mb
  int64_t blend_cache_mb = 64;
  bool weight_repack = true;                   // cpu: EngineOptions::weight_repack
};

class ServingBackend {
 public:
  virtual ~ServingBackend() = default;
  virtual worker::StepExecutor& executor() = 0;
  // One line for the start-up log (device, dtype, threads, pool size).
  virtual std::string describe() const = 0;
  // The kernel path in use, for tessera_worker_info: "scalar", "avx2", "avx512" (cpu), "cuda".
  virtual std::string kernel_isa() const { return "cuda"; }
  // The page pool's element type and size, for tessera_worker_kv_pool_bytes (0 = not known).
  virtual std::string kv_dtype() const { return ""; }
  virtual int64_t kv_pool_bytes() const { return 0; }
};

// "cpu", "cuda", "sim" or "auto" -> "cpu", "cuda" or "sim", checked before the model is loaded. `needs_kv_fill`:
// the configuration asks for preference K/V injection (--kvstore). Errors (kUnavailable,
// kUnsupported, kInvalidArgument) carry a message that starts with "--backend ...". `why` (may
// be null) receives how auto decided.
Result<std::string> resolve_backend(const std::string& requested, bool needs_kv_fill, std::string* why);

// Builds the resolved backend over `model` (which must outlive it).
Result<std::unique_ptr<ServingBackend>> create_backend(const std::string& resolved, const Model& model,
                                                       const BackendOptions& options);

// Implemented by cuda/cuda_on.cpp or cuda/cuda_off.cpp.
namespace cuda_support {
bool compiled_in();
Result<int32_t> probe_devices();  // >= 1, or kUnavailable naming the cause
Result<std::unique_ptr<ServingBackend>> create(const Model& model, const BackendOptions& options);
}  // namespace cuda_support

}  // namespace tessera::worker_app
