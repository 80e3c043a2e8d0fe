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
// A fresh empty directory under the system temp dir (<prefix>-<random>). It is removed with its
// contents when the test program exits normally, unless a test failed or TESSERA_KEEP_TEMP=1
// (then its path is printed); a caller may remove it earlier. Thread-safe.
std::string make_temp_dir(const std::string& prefix);

}  // namespace tessera::testing
