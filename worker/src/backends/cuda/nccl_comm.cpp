// NCCL communicators for tensor parallelism on one node.
#include <nccl.h>

#include <string>

#include "device_comm.h"

namespace tessera::worker::cuda_backend {
namespace {

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return ok_status();
  return make_error(ErrorCode::kInternal, std::string("NCCL: ") + what + " failed: " + ncclGetErrorString(r));
}

class NcclComm final : public DeviceComm {
 public:
  explicit NcclComm(ncclComm_t c) : comm_(c) {}
  ~NcclComm() override { ncclCommDestroy(comm_); }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  Status all_reduce_sum(float* data, size_t n, cudaStream_t stream) override {
    return nccl_status(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream), "ncclAllReduce");
  }

 private:
  ncclComm_t comm_;
};

}  // namespace

Result<std::vector<std::unique_ptr<DeviceComm>>> make_device_comms(int32_t world) {
  std::vector<ncclComm_t> comms(static_cast<size_t>(world));
  std::vector<int> devs(static_cast<size_t>(world));
  for (int32_t r = 0; r < world; ++r) devs[static_cast<size_t>(r)] = r;
  TS_TRY(nccl_status(ncclCommInitAll(comms.data(), world, devs.data()), "ncclCommInitAll"));
  std::vector<std::unique_ptr<DeviceComm>> out;
  for (ncclComm_t c : comms) out.push_back(std::make_unique<NcclComm>(c));
  return out;
}

}  // namespace tessera::worker::cuda_backend
