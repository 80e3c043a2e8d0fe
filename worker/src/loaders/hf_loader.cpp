#include "loaders/loaded_model.h"

namespace tessera::worker::loaders {
Result<std::unique_ptr<Model>> load_hf_directory(const std::string& dir, const LoadOptions&) {
  return make_error(ErrorCode::kUnsupported, dir + ": not implemented yet: Hugging Face safetensors loader");
}
}  // namespace tessera::worker::loaders
