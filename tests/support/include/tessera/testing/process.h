// A real binary started by a test, on common's ChildProcess: stdout on a pipe (tests read the
// LISTENING / READY line a service prints), stderr to a log file (or inherited), bounded waits.
//
//   Process scheduler(bin_path("tessera-scheduler"), {"--metrics-port", "0"}, dir + "/scheduler.log");
//   std::string line = scheduler.wait_line("LISTENING", 10s);
//   int port = std::atoi(line_field(line, "metrics").c_str());
//
// Ownership: owns the process; the destructor stops it if it still runs (terminate(): SIGTERM,
// 5 s, then SIGKILL) and reaps it. Not thread-safe: use from the test's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "tessera/common/child_process.h"

namespace tessera::testing {

class Process {
 public:
  // `log_path` "" leaves stderr on the test's stderr. A binary that cannot be started leaves a
  // Process that is not alive() (the reason is printed).
  Process(const std::string& binary, const std::vector<std::string>& args, const std::string& log_path = "");
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // The first stdout line starting with `prefix`, or "" at the deadline / EOF.
  std::string wait_line(const std::string& prefix, std::chrono::milliseconds timeout);
  bool alive();
  void signal(int sig);
  // Waits for the exit: the exit status (exit code, or 128 + signal), -1 at the deadline.
  int wait_exit(std::chrono::milliseconds timeout);
  // SIGTERM, up to `grace` for the exit, then SIGKILL: the exit status as wait_exit, -1 if
  // SIGKILL was needed.
  int terminate(std::chrono::milliseconds grace = std::chrono::seconds(5));
  pid_t pid() const { return child_.pid(); }
  const std::string& log_path() const { return log_path_; }

 private:
  ChildProcess child_;
  std::string log_path_;
};

// The value of `field=` in a "KEY=value KEY=value" line such as LISTENING ("" when absent).
std::string line_field(const std::string& line, const std::string& field);

}  // namespace tessera::testing
