// The "cuda" Backend (backend.h) over one CudaEngine's state: geometry, capabilities and the
// entry points the StepExecutor drives. Validation, releases, sampling and results are the
// executor's (step_executor.h), shared with the CPU engine.
#include <string>

#include "cuda_engine_impl.h"

namespace tessera::worker {
namespace {

class CudaRankBackend final : public Backend {
 public:
  explicit CudaRankBackend(CudaEngine::Impl& im) : im_(im) {}

  std::string_view name() const override { return "cuda"; }
  const Model& model() const override { return im_.model; }

  PoolGeometry geometry() const override {
    return {.num_pages = im_.num_pages, .page_size = im_.opt.page_size, .n_layers = im_.cfg.n_layers,
            .n_kv_heads = im_.cfg.n_kv_heads, .head_dim = im_.cfg.head_dim};
  }

  BackendCaps capabilities() const override {
    // Greedy rows take the device argmax; every other option is sampled on the host from the
    // copied-back logits. No kv_fill: pages are not readable/writable from the host yet.
    BackendCaps c;
    c.kv_fill = false;
    c.greedy = Where::kDevice;
    c.max_seqs = im_.opt.max_seqs;
    c.max_batch_tokens = im_.opt.max_batch_tokens;
    c.max_context = im_.max_context;
    c.max_head_dim = kernels::cuda::kMaxHeadDim;
    return c;
  }

  Result<std::span<float>> forward(std::span<const SeqInput> batch) override {
    if (batch.empty()) {
      TS_CUDA_TRY(cudaSetDevice(im_.opt.device));
      TS_CUDA_TRY(cudaStreamSynchronize(im_.stream));  // the step's page copies are done
      return std::span<float>{};
    }
    return im_.run(batch);
  }

  Result<std::vector<int32_t>> forward_argmax(std::span<const SeqInput> batch) override { return im_.run_greedy(batch); }

  Status copy_page(int32_t src, int32_t dst) override {
    TS_CUDA_TRY(cudaSetDevice(im_.opt.device));
    return im_.copy_page(src, dst);
  }

 private:
  CudaEngine::Impl& im_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(CudaEngine::Impl& impl) { return std::make_unique<CudaRankBackend>(impl); }

Result<std::span<const float>> CudaEngine::forward(std::span<const SeqInput> batch) { return impl_->executor->forward(batch); }
Result<StepResult> CudaEngine::execute(const StepPlan& plan) { return impl_->executor->execute(plan); }
Backend& CudaEngine::backend() { return *impl_->backend; }
StepExecutor& CudaEngine::executor() { return *impl_->executor; }

}  // namespace tessera::worker
