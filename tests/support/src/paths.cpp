#include "tessera/testing/paths.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <random>
#include <vector>

#include <gtest/gtest.h>

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

// Every directory make_temp_dir() created, removed when the test program exits normally: a test
// that forgets to clean up (or stops at a failed ASSERT) leaves nothing in /tmp. A failed program
// keeps its directories (logs to read) and names them; TESSERA_KEEP_TEMP=1 keeps them always.
class TempDirs {
 public:
  void add(std::string dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(std::move(dir));
  }
  ~TempDirs() {
    const char* keep = std::getenv("TESSERA_KEEP_TEMP");
    const bool failed = ::testing::UnitTest::GetInstance()->Failed();
    for (const std::string& d : dirs_) {
      std::error_code ec;
      if (failed || (keep != nullptr && *keep != '\0' && *keep != '0')) {
        if (std::filesystem::exists(d, ec)) std::fprintf(stderr, "kept temporary directory %s\n", d.c_str());
        continue;
      }
      std::filesystem::remove_all(d, ec);
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::string> dirs_;
};

TempDirs& temp_dirs() {
  static TempDirs dirs;
  return dirs;
}

}  // namespace

std::string shared_path(const std::string& relative) { return env_dir("TESSERA_SHARED_DIR") + "/" + relative; }
std::string bin_path(const std::string& name) { return env_dir("TESSERA_BIN_DIR") + "/" + name; }
std::string source_path(const std::string& relative) { return env_dir("TESSERA_SOURCE_DIR") + "/" + relative; }

std::string make_temp_dir(const std::string& prefix) {
  std::random_device rd;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto p = std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(rd()));
    if (std::filesystem::create_directory(p)) {
      temp_dirs().add(p.string());
      return p.string();
    }
  }
  std::fprintf(stderr, "make_temp_dir: could not create a directory for %s\n", prefix.c_str());
  std::abort();
}

}  // namespace tessera::testing
