// Built instead of nccl_comm.cpp when NCCL is off or not found.
#include "device_comm.h"

namespace tessera::worker::cuda_backend {

Result<std::vector<std::unique_ptr<DeviceComm>>> make_device_comms(int32_t world) {
  return make_error(ErrorCode::kUnsupported, "tensor parallelism over " + std::to_string(world) +
                                                 " GPUs needs NCCL: rebuild with TESSERA_NCCL=ON and nccl.h installed");
}

}  // namespace tessera::worker::cuda_backend
