// Private: creation of the device communicators for tensor parallelism. Exactly one of
// nccl_comm.cpp (NCCL found) and nccl_unavailable.cpp is compiled (CMake chooses).
#pragma once

#include <memory>
#include <vector>

#include "cuda_engine_impl.h"

namespace tessera::worker::cuda_backend {

// One communicator per device 0..world-1, all in one clique (ncclCommInitAll).
Result<std::vector<std::unique_ptr<DeviceComm>>> make_device_comms(int32_t world);

}  // namespace tessera::worker::cuda_backend
