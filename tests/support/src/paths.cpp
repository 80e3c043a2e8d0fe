#include "tessera/testing/paths.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

namespace tessera::testing {
namespace {

std::string env_dir(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    std::fprintf(stderr, "test environment: %s is not set (run the test through ctest)\n", name);
    std::abort();
  }
  return v;
}

}  // namespace

std::string shared_path(const std::string& relative) { return env_dir("TESSERA_SHARED_DIR") + "/" + relative; }
std::string bin_path(const std::string& name) { return env_dir("TESSERA_BIN_DIR") + "/" + name; }
std::string source_path(const std::string& relative) { return env_dir("TESSERA_SOURCE_DIR") + "/" + relative; }

std::string make_temp_dir(const std::string& prefix) {
  std::random_device rd;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto p = std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(rd()));
    if (std::filesystem::create_directory(p)) return p.string();
  }
  std::fprintf(stderr, "make_temp_dir: could not create a directory for %s\n", prefix.c_str());
  std::abort();
}

}  // namespace tessera::testing
