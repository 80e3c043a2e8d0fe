// Tensor parallelism on the GPUs of one node: one CudaEngine per rank over its shard, NCCL
// all-reduce inside the forward; the "cuda-tp" Backend runs every forward on all ranks, each on
// its own thread, and one StepExecutor (validation, sampling) serves the whole group.
#include <algorithm>
#include <functional>
#include <string>
#include <thread>

#include "device_comm.h"
#include "tensor_parallel.h"

namespace tessera::worker {

struct CudaTpEngine::Impl {
  const Model* model = nullptr;  // the whole model (borrowed)
  std::vector<std::unique_ptr<tp::ShardModel>> shards;
  std::vector<std::unique_ptr<cuda_backend::DeviceComm>> comms;
  std::vector<std::unique_ptr<CudaEngine>> ranks;  // rank r on device r

  // Runs fn(r) for every rank on its own thread; returns rank 0's status, else the first error.
  Status on_all_ranks(const std::function<Status(int32_t)>& fn) {
    std::vector<Status> st(ranks.size());
    std::vector<std::thread> threads;
    for (size_t r = 1; r < ranks.size(); ++r) threads.emplace_back([&, r] { st[r] = fn(static_cast<int32_t>(r)); });
    st[0] = fn(0);
    for (auto& t : threads) t.join();
    for (auto& s : st) {
      if (!s.ok()) return s;
    }
    return ok_status();
  }

  std::unique_ptr<Backend> backend;    // TpBackend over this Impl
  std::unique_ptr<StepExecutor> exec;  // borrows *backend
};

namespace {

// Every rank computes the same step on its shard (the all-reduced logits are equal on all
// ranks); rank 0's logits or tokens are the answer.
class TpBackend final : public Backend {
 public:
  explicit TpBackend(CudaTpEngine::Impl& tp) : tp_(tp) {}
  std::string_view name() const override { return "cuda-tp"; }
  const Model& model() const override { return *tp_.model; }
  PoolGeometry geometry() const override {
    PoolGeometry g = rank(0).geometry();  // pages and page size are the same on every rank
    g.n_kv_heads = tp_.model->config().n_kv_heads;
    return g;
  }
  BackendCaps capabilities() const override { return rank(0).capabilities(); }

  Result<std::span<float>> forward(std::span<const SeqInput> batch) override {
    std::span<float> out;
    TS_TRY(tp_.on_all_ranks([&](int32_t r) -> Status {
      TS_ASSIGN_OR_RETURN(auto logits, rank(r).forward(batch));
      if (r == 0) out = logits;
      return ok_status();
    }));
    return out;
  }

  Result<std::vector<int32_t>> forward_argmax(std::span<const SeqInput> batch) override {
    std::vector<int32_t> out;
    TS_TRY(tp_.on_all_ranks([&](int32_t r) -> Status {
      TS_ASSIGN_OR_RETURN(auto tokens, rank(r).forward_argmax(batch));
      if (r == 0) out = std::move(tokens);
      return ok_status();
    }));
    return out;
  }

  Status copy_page(int32_t src, int32_t dst) override {
    for (size_t r = 0; r < tp_.ranks.size(); ++r) TS_TRY(rank(static_cast<int32_t>(r)).copy_page(src, dst));
    return ok_status();
  }

 private:
  Backend& rank(int32_t r) const { return tp_.ranks[static_cast<size_t>(r)]->backend(); }
  CudaTpEngine::Impl& tp_;
};

}  // namespace

Result<std::unique_ptr<CudaTpEngine>> CudaTpEngine::create(const Model& model, int32_t world, const CudaEngineOptions& options) {
  if (world < 1 || world > cuda_device_count()) {
    return make_error(ErrorCode::kInvalidArgument, "tensor parallel: world " + std::to_string(world) + " but " +
                                                       std::to_string(cuda_device_count()) + " CUDA devices");
  }
  auto im = std::make_unique<Impl>();
  im->model = &model;
  TS_ASSIGN_OR_RETURN(std::vector<tp::RankShard> plan, tp::plan_shards(model, world));
  for (const tp::RankShard& s : plan) {
    TS_ASSIGN_OR_RETURN(auto shard, tp::shard_model(model, s));
    im->shards.push_back(std::move(shard));
  }
  if (world > 1) {
    TS_ASSIGN_OR_RETURN(im->comms, cuda_backend::make_device_comms(world));
  }
  for (int32_t r = 0; r < world; ++r) {
    CudaEngineOptions o = options;
    o.device = r;
    TS_ASSIGN_OR_RETURN(auto engine, CudaEngine::create(*im->shards[static_cast<size_t>(r)], o));
    if (world > 1) engine->impl_->comm = im->comms[static_cast<size_t>(r)].get();
    im->ranks.push_back(std::move(engine));
  }
  // Every rank must hold the same number of pages (the scheduler sees one pool).
  int32_t pages = im->ranks[0]->num_pages();
  for (auto& e : im->ranks) pages = std::min(pages, e->num_pages());
  for (auto& e : im->ranks) e->impl_->num_pages = pages;
  im->backend = std::make_unique<TpBackend>(*im);
  im->exec = std::make_unique<StepExecutor>(*im->backend);
  return std::unique_ptr<CudaTpEngine>(new CudaTpEngine(std::move(im)));
}

CudaTpEngine::CudaTpEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaTpEngine::~CudaTpEngine() = default;
int32_t CudaTpEngine::world() const { return static_cast<int32_t>(impl_->ranks.size()); }

Backend& CudaTpEngine::backend() { return *impl_->backend; }
StepExecutor& CudaTpEngine::executor() { return *impl_->exec; }
Result<std::span<const float>> CudaTpEngine::forward(std::span<const SeqInput> batch) { return impl_->exec->forward(batch); }
Result<StepResult> CudaTpEngine::execute(const StepPlan& plan) { return impl_->exec->execute(plan); }

}  // namespace tessera::worker
