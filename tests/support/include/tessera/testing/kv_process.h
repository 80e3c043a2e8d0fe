// Runs the real tessera-kvstore binary for a test: started with flags, its endpoint read from
// the "listening on" line of its stdout (waited for with a deadline), stopped (SIGTERM, then
// SIGKILL) on destruction. Built on common's ChildProcess.
//
// Ownership: owns the process and its log file (the child's stderr, removed with it).
// Not thread-safe: use from the test's thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/common/child_process.h"

namespace tessera::kvstore::testing {

class KvProcess {
 public:
  // `args` are flags after the program name; --listen defaults to tcp://127.0.0.1:*; without
  // --curve-dir or --insecure, the test key set (curve_keys.h) is given.
  // Returns nullptr (after printing why) when it did not come up within the deadline.
  static std::unique_ptr<KvProcess> start(std::vector<std::string> args,
                                          std::chrono::milliseconds deadline = std::chrono::seconds(15));
  ~KvProcess();
  const std::string& endpoint() const { return endpoint_; }
  bool alive();  // has not exited
  // Runs the binary to completion and returns (exit code, stdout+stderr) — for flag errors.
  static std::pair<int, std::string> run_to_exit(std::vector<std::string> args);

 private:
  KvProcess() = default;
  ChildProcess child_;
  std::string endpoint_;
  std::string log_path_;  // the child's stderr, removed with the process
};

}  // namespace tessera::kvstore::testing
