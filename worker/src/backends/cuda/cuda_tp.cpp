// Tensor parallelism on the GPUs of one node: one CudaEngine per rank over its shard, NCCL
// all-reduce inside the forward; every call runs all ranks on their own threads.
#include <algorithm>
#include <functional>
#include <string>
#include <thread>

#include "device_comm.h"
#include "tensor_parallel.h"

namespace tessera::worker {

struct CudaTpEngine::Impl {
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
};

Result<std::unique_ptr<CudaTpEngine>> CudaTpEngine::create(const Model& model, int32_t world, const CudaEngineOptions& options) {
  if (world < 1 || world > cuda_device_count()) {
    return make_error(ErrorCode::kInvalidArgument, "tensor parallel: world " + std::to_string(world) + " but " +
                                                       std::to_string(cuda_device_count()) + " CUDA devices");
  }
  auto im = std::make_unique<Impl>();
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
  return std::unique_ptr<CudaTpEngine>(new CudaTpEngine(std::move(im)));
}

CudaTpEngine::CudaTpEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaTpEngine::~CudaTpEngine() = default;
int32_t CudaTpEngine::world() const { return static_cast<int32_t>(impl_->ranks.size()); }

Result<std::span<const float>> CudaTpEngine::forward(std::span<const SeqInput> batch) {
  std::span<const float> out;
  TS_TRY(impl_->on_all_ranks([&](int32_t r) -> Status {
    TS_ASSIGN_OR_RETURN(auto logits, impl_->ranks[static_cast<size_t>(r)]->forward(batch));
    if (r == 0) out = logits;
    return ok_status();
  }));
  return out;
}

Result<StepResult> CudaTpEngine::execute(const StepPlan& plan) {
  // Every rank validates, computes and samples the same way (the all-reduced logits are equal
  // on all ranks); rank 0's answer goes to the scheduler.
  StepResult out;
  TS_TRY(impl_->on_all_ranks([&](int32_t r) -> Status {
    TS_ASSIGN_OR_RETURN(StepResult res, impl_->ranks[static_cast<size_t>(r)]->execute(plan));
    if (r == 0) out = std::move(res);
    return ok_status();
  }));
  return out;
}

}  // namespace tessera::worker
