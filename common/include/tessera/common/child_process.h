// ChildProcess: the one way Tessera starts another program (`tessera up`'s supervisor, the test
// launchers in tests/support). posix_spawn underneath: arguments, extra environment variables,
// where stdout/stderr go (inherited, a pipe the parent reads, a file, /dev/null), an optional new
// process group; then pid, running(), signals, bounded waits and SIGTERM-then-SIGKILL.
//
//   auto child = ChildProcess::spawn({.binary = "/usr/bin/tessera-worker", .args = {"--model", m},
//                                     .stdout_to = ChildOutput::pipe(),
//                                     .stderr_to = ChildOutput::file("/tmp/worker.log")});
//   std::string line = child->read_line("LISTENING", 10s);
//   ExitStatus st = child->terminate(5s);
//
// Ownership: a ChildProcess owns the process and the read end of its stdout pipe. It is
// move-only; the destructor SIGKILLs a still-running child and reaps it, so no child outlives its
// owner unnoticed and none is left a zombie. Pipes are close-on-exec: a child never inherits the
// pipe of another.
// Threading: not thread-safe; use an object from one thread at a time. Different objects are
// independent (each reaps only its own pid with waitpid(pid)).
// Invariant: once status() has a value the pid is reaped; signal() is then a no-op.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/common/result.h"

namespace tessera {

// Where one of the child's output streams goes.
struct ChildOutput {
  enum class Kind { kInherit, kPipe, kFile, kNull, kSameAsStdout };
  Kind kind = Kind::kInherit;
  std::string path;     // kFile
  bool append = false;  // kFile: append instead of truncate

  static ChildOutput inherit() { return of(Kind::kInherit); }
  static ChildOutput pipe() { return of(Kind::kPipe); }  // stdout only: read by the parent
  static ChildOutput file(std::string path, bool append = false) {
    ChildOutput o = of(Kind::kFile);
    o.path = std::move(path);
    o.append = append;
    return o;
  }
  static ChildOutput null() { return of(Kind::kNull); }
  static ChildOutput same_as_stdout() { return of(Kind::kSameAsStdout); }  // stderr only

 private:
  static ChildOutput of(Kind kind) {
    ChildOutput o;
    o.kind = kind;
    return o;
  }
};

struct SpawnOptions {
  std::string binary;                                    // a path; a bare name with search_path
  std::vector<std::string> args;                         // argv[1..]; argv[0] is `binary`
  std::vector<std::pair<std::string, std::string>> env;  // set on top of the parent's environment
  ChildOutput stdout_to;
  ChildOutput stderr_to;
  bool search_path = false;        // look `binary` up in PATH (posix_spawnp)
  bool new_process_group = false;  // the child leads its own group (a terminal's Ctrl-C skips it)
};

// How a child ended (a waitpid status).
class ExitStatus {
 public:
  explicit ExitStatus(int raw) : raw_(raw) {}
  int raw() const { return raw_; }
  bool exited() const;       // returned from main / called exit
  int code() const;          // exit code when exited(), else -1
  bool signaled() const;     // killed by a signal
  int term_signal() const;   // that signal, else 0
  int shell_code() const;    // code() when exited, 128 + signal when signaled (as a shell reports it)
  std::string describe() const;  // "exit status 1", "signal Killed"

 private:
  int raw_;
};

class ChildProcess {
 public:
  // Errors: kUnavailable (the binary cannot be run, a pipe or file cannot be opened).
  static Result<ChildProcess> spawn(const SpawnOptions& options);

  ChildProcess() = default;  // no process
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // True while the process has not exited (reaps it, without blocking, when it has).
  bool running();
  // The exit status once the process was reaped.
  const std::optional<ExitStatus>& status() const { return status_; }
  // Sends `sig` while the process runs; false when it already ended.
  bool signal(int sig);
  // Waits up to `timeout` for the exit; nullopt when still running at the deadline.
  std::optional<ExitStatus> wait_for(std::chrono::milliseconds timeout);
  ExitStatus wait();  // blocks until the exit
  // SIGTERM, then up to `grace` for the exit, then SIGKILL. `killed` (optional) says whether
  // SIGKILL was needed.
  ExitStatus terminate(std::chrono::milliseconds grace, bool* killed = nullptr);

  // ---- stdout on a pipe (ChildOutput::pipe()) ----
  // The first whole line that starts with `prefix` (without its '\n'); earlier lines are
  // dropped. "" at the deadline or at EOF.
  std::string read_line(const std::string& prefix, std::chrono::milliseconds timeout);
  // Everything until EOF (the child closed stdout, usually by exiting), including anything
  // buffered by read_line.
  std::string read_all();

 private:
  void reset();
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffered_;  // read from the pipe but not yet returned
  std::optional<ExitStatus> status_;
};

// Runs a program to completion: its exit status and, when options.stdout_to is a pipe, its
// stdout (with stderr too when stderr_to is same_as_stdout()).
Result<std::pair<ExitStatus, std::string>> run_to_exit(const SpawnOptions& options);

}  // namespace tessera
