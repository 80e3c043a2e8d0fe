// The CUDA half of --backend (backend_select.h): CudaEngine on device 0, or CudaTpEngine over
// devices [0, tensor_parallel).
#include <algorithm>
#include <string>

#include "../backend_select.h"
#include "tessera/worker/cuda_backend.h"

namespace tessera::worker_app::cuda_support {
namespace {

template <class E>
class CudaServing final : public ServingBackend {
 public:
  CudaServing(std::unique_ptr<E> e, std::string what, std::string dtype)
      : engine_(std::move(e)), what_(std::move(what)), dtype_(std::move(dtype)) {}
  worker::StepExecutor& executor() override { return engine_->executor(); }
  std::string describe() const override { return what_; }
  std::string kv_dtype() const override { return dtype_; }

 private:
  std::unique_ptr<E> engine_;
  std::string what_;
  std::string dtype_;
};

}  // namespace

bool compiled_in() { return true; }

Result<int32_t> probe_devices() { return worker::probe_cuda_devices(); }

Result<std::unique_ptr<ServingBackend>> create(const Model& model, const BackendOptions& o) {
  if (o.pool.dtype == kernels::KvDtype::kInt8) {
    return make_error(ErrorCode::kUnsupported, "--kv-dtype int8: the cuda backend has no int8 K/V pages (its pages are "
                                               "--cuda-dtype " + o.cuda_dtype + "); use --kv-dtype f16 or --backend cpu");
  }
  if (o.pool.memory_mb > 0) {
    return make_error(ErrorCode::kUnsupported, "--kv-memory-mb: the cuda backend sizes its pool by --num-pages only");
  }
  worker::CudaEngineOptions co;
  co.dtype = o.cuda_dtype == "f16" ? kernels::cuda::HalfType::kF16 : kernels::cuda::HalfType::kBF16;
  co.num_pages = o.pool.num_pages;
  co.page_size = o.pool.page_size;
  co.max_batch_tokens = o.max_batch_tokens;
  co.max_seqs = std::min(o.max_batch_tokens, 1024);  // a step has at most one sequence per token
  const std::string what = "cuda backend, " + o.cuda_dtype + ", " + std::to_string(o.pool.num_pages) + " pages";
  if (o.tensor_parallel > 1) {
    TS_ASSIGN_OR_RETURN(auto tp, worker::CudaTpEngine::create(model, o.tensor_parallel, co));
    return std::unique_ptr<ServingBackend>(new CudaServing<worker::CudaTpEngine>(
        std::move(tp), what + ", tensor-parallel over " + std::to_string(o.tensor_parallel) + " GPUs", o.cuda_dtype));
  }
  TS_ASSIGN_OR_RETURN(auto e, worker::CudaEngine::create(model, co));
  const std::string detail = what + " on device 0, " + std::to_string(e->weight_bytes() >> 20) + " MiB of weights";
  return std::unique_ptr<ServingBackend>(new CudaServing<worker::CudaEngine>(std::move(e), detail, o.cuda_dtype));
}

}  // namespace tessera::worker_app::cuda_support
