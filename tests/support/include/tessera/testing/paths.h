// Where tests find their data and the built binaries.
//   shared_path("models/stories260K/stories260K.bin") -> $TESSERA_SHARED_DIR/models/...
//   bin_path("tessera")                               -> $TESSERA_BIN_DIR/tessera
// Both abort with a clear message when the variable is unset (CTest always sets them).
#pragma once

#include <string>

namespace tessera::testing {

std::string shared_path(const std::string& relative);
std::string bin_path(const std::string& name);
std::string source_path(const std::string& relative);
// A fresh empty directory under the system temp dir, removed by the caller if it wants.
std::string make_temp_dir(const std::string& prefix);

}  // namespace tessera::testing
