#include "tessera/common/check.h"

#include <cstdio>
#include <cstdlib>

namespace tessera::detail {

CheckFailure::CheckFailure(const char* file, int line, const char* expr) {
  os_ << file << ":" << line << ": check failed: " << expr << " ";
}

CheckFailure::~CheckFailure() {
  std::string msg = os_.str();
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace tessera::detail
