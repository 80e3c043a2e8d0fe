#include "loaders/loaded_model.h"

namespace tessera::worker::loaders {
Result<std::unique_ptr<Model>> load_gguf(std::shared_ptr<const FileBytes> file) {
  return make_error(ErrorCode::kUnsupported, file->path() + ": not implemented yet: GGUF loader");
}
}  // namespace tessera::worker::loaders
