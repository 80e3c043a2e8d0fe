#include "tessera/testing/kv_process.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "tessera/testing/curve_keys.h"
#include "tessera/testing/paths.h"

namespace tessera::kvstore::testing {

std::unique_ptr<KvProcess> KvProcess::start(std::vector<std::string> args, std::chrono::milliseconds deadline) {
  bool has_listen = false, has_security = false;
  for (const auto& a : args) {
    has_listen = has_listen || a.rfind("--listen", 0) == 0;
    has_security = has_security || a.rfind("--curve-dir", 0) == 0 || a.rfind("--insecure", 0) == 0;
  }
  if (!has_security) args = tessera::testing::with_keys(std::move(args));
  if (!has_listen) {
    args.push_back("--listen");
    args.push_back("tcp://127.0.0.1:*");
  }
  std::unique_ptr<KvProcess> p(new KvProcess());
  static int counter = 0;
  p->log_path_ = "/tmp/tessera-kvstore-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".log";
  auto child = ChildProcess::spawn({.binary = tessera::testing::bin_path("tessera-kvstore"),
                                    .args = std::move(args),
                                    .stdout_to = ChildOutput::pipe(),
                                    .stderr_to = ChildOutput::file(p->log_path_, /*append=*/true)});
  if (!child.ok()) {
    std::fprintf(stderr, "KvProcess: %s\n", child.error().to_string().c_str());
    return nullptr;
  }
  p->child_ = std::move(child).value();
  const std::string marker = "tessera-kvstore listening on ";
  const std::string line = p->child_.read_line(marker, deadline);
  if (!line.empty()) {
    const size_t end = line.find(' ', marker.size());
    p->endpoint_ = line.substr(marker.size(), end == std::string::npos ? std::string::npos : end - marker.size());
    return p;
  }
  std::ifstream log(p->log_path_);
  std::stringstream text;
  text << log.rdbuf();
  std::fprintf(stderr, "KvProcess: tessera-kvstore did not come up; log (%s):\n%s\n", p->log_path_.c_str(),
               text.str().c_str());
  return nullptr;
}

bool KvProcess::alive() { return child_.running(); }

KvProcess::~KvProcess() {
  (void)child_.terminate(std::chrono::seconds(10));
  if (!log_path_.empty()) ::unlink(log_path_.c_str());
}

std::pair<int, std::string> KvProcess::run_to_exit(std::vector<std::string> args) {
  auto r = tessera::run_to_exit({.binary = tessera::testing::bin_path("tessera-kvstore"),
                                 .args = std::move(args),
                                 .stdout_to = ChildOutput::pipe(),
                                 .stderr_to = ChildOutput::same_as_stdout()});
  if (!r.ok()) return {-1, "spawn failed: " + r.error().to_string()};
  return {r->first.code(), r->second};
}

}  // namespace tessera::kvstore::testing
