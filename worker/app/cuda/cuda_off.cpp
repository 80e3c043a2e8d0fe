// Built instead of cuda_on.cpp when CUDA support is not compiled in (backend_select.h).
#include "../backend_select.h"

namespace tessera::worker_app::cuda_support {

bool compiled_in() { return false; }

Result<int32_t> probe_devices() {
  return make_error(ErrorCode::kUnsupported, "CUDA support was not compiled in");
}

Result<std::unique_ptr<ServingBackend>> create(const Model&, const BackendOptions&) {
  return make_error(ErrorCode::kUnsupported, "--backend cuda: CUDA support was not compiled in");
}

}  // namespace tessera::worker_app::cuda_support
