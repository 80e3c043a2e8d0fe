#include "tessera/common/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

extern char** environ;

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Closes the descriptors it holds on every path out of spawn().
struct Fds {
  int read_end = -1, write_end = -1;
  ~Fds() {
    if (read_end >= 0) ::close(read_end);
    if (write_end >= 0) ::close(write_end);
  }
};

// Adds the file actions that wire `fd` (STDOUT_FILENO or STDERR_FILENO) as `out` says.
void wire(posix_spawn_file_actions_t* actions, int fd, const ChildOutput& out, int pipe_write_end) {
  switch (out.kind) {
    case ChildOutput::Kind::kInherit: break;
    case ChildOutput::Kind::kPipe: posix_spawn_file_actions_adddup2(actions, pipe_write_end, fd); break;
    case ChildOutput::Kind::kFile:
      posix_spawn_file_actions_addopen(actions, fd, out.path.c_str(),
                                       O_WRONLY | O_CREAT | (out.append ? O_APPEND : O_TRUNC), 0644);
      break;
    case ChildOutput::Kind::kNull: posix_spawn_file_actions_addopen(actions, fd, "/dev/null", O_WRONLY, 0); break;
    case ChildOutput::Kind::kSameAsStdout: posix_spawn_file_actions_adddup2(actions, STDOUT_FILENO, fd); break;
  }
}

// The parent's environment with `extra` set on top ("NAME=value" strings).
std::vector<std::string> environment_with(const std::vector<std::pair<std::string, std::string>>& extra) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra) vars[k] = v;
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

}  // namespace

bool ExitStatus::exited() const { return WIFEXITED(raw_); }
int ExitStatus::code() const { return WIFEXITED(raw_) ? WEXITSTATUS(raw_) : -1; }
bool ExitStatus::signaled() const { return WIFSIGNALED(raw_); }
int ExitStatus::term_signal() const { return WIFSIGNALED(raw_) ? WTERMSIG(raw_) : 0; }
int ExitStatus::shell_code() const { return signaled() ? 128 + term_signal() : code(); }
std::string ExitStatus::describe() const {
  if (exited()) return "exit status " + std::to_string(code());
  if (signaled()) return std::string("signal ") + ::strsignal(term_signal());
  return "status " + std::to_string(raw_);
}

Result<ChildProcess> ChildProcess::spawn(const SpawnOptions& o) {
  if (o.stderr_to.kind == ChildOutput::Kind::kPipe)
    return make_error(ErrorCode::kInvalidArgument, "ChildProcess: only stdout can go to a pipe");
  Fds pipe_fds;
  if (o.stdout_to.kind == ChildOutput::Kind::kPipe) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      return make_error(ErrorCode::kUnavailable, std::string("pipe: ") + std::strerror(errno));
    pipe_fds.read_end = fds[0];
    pipe_fds.write_end = fds[1];
  }
  std::vector<std::string> args;
  args.reserve(o.args.size() + 1);
  args.push_back(o.binary);
  args.insert(args.end(), o.args.begin(), o.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  if (!o.env.empty()) {
    env_strings = environment_with(o.env);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
  }

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  wire(&actions, STDOUT_FILENO, o.stdout_to, pipe_fds.write_end);
  wire(&actions, STDERR_FILENO, o.stderr_to, pipe_fds.write_end);
  // The child starts with no signal blocked and SIGINT/SIGTERM at their default disposition: a
  // parent that waits for them on a thread (signals.h) blocks them, and a blocked mask survives
  // exec. Other dispositions (an ignored SIGPIPE) are inherited as with fork/exec.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (o.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);
  pid_t pid = -1;
  char** env = o.env.empty() ? environ : envp.data();
  const int rc = o.search_path ? ::posix_spawnp(&pid, o.binary.c_str(), &actions, &attr, argv.data(), env)
                               : ::posix_spawn(&pid, o.binary.c_str(), &actions, &attr, argv.data(), env);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return make_error(ErrorCode::kUnavailable, "cannot run " + o.binary + ": " + std::strerror(rc));
  ChildProcess child;
  child.pid_ = pid;
  child.out_fd_ = pipe_fds.read_end;
  pipe_fds.read_end = -1;  // now owned by `child`; the write end closes here (the child has its copy)
  return child;
}

ChildProcess::~ChildProcess() { reset(); }

void ChildProcess::reset() {
  if (pid_ > 0 && !status_) {
    ::kill(pid_, SIGKILL);
    (void)wait();
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  pid_ = -1;
  out_fd_ = -1;
  buffered_.clear();
  status_.reset();
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this == &other) return *this;
  reset();
  pid_ = std::exchange(other.pid_, -1);
  out_fd_ = std::exchange(other.out_fd_, -1);
  buffered_ = std::move(other.buffered_);
  status_ = std::exchange(other.status_, std::nullopt);
  return *this;
}

bool ChildProcess::running() {
  if (pid_ <= 0 || status_) return false;
  int st = 0;
  const pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_.emplace(st);
    return false;
  }
  return r == 0;
}

bool ChildProcess::signal(int sig) {
  if (!running()) return false;
  return ::kill(pid_, sig) == 0;
}

std::optional<ExitStatus> ChildProcess::wait_for(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (running()) {
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(milliseconds(5));  // the polling interval of waitpid, bounded by the deadline
  }
  return status_;
}

ExitStatus ChildProcess::wait() {
  if (status_) return *status_;
  if (pid_ <= 0) return ExitStatus(-1);
  int st = 0;
  pid_t r;
  while ((r = ::waitpid(pid_, &st, 0)) < 0 && errno == EINTR) {
  }
  status_.emplace(r == pid_ ? st : -1);
  return *status_;
}

ExitStatus ChildProcess::terminate(milliseconds grace, bool* killed) {
  if (killed) *killed = false;
  if (signal(SIGTERM)) {
    if (auto st = wait_for(grace)) return *st;
    if (killed) *killed = true;
    (void)signal(SIGKILL);
  }
  return wait();
}

std::string ChildProcess::read_line(const std::string& prefix, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    size_t eol;
    while ((eol = buffered_.find('\n')) != std::string::npos) {
      std::string line = buffered_.substr(0, eol);
      buffered_.erase(0, eol + 1);
      if (line.rfind(prefix, 0) == 0) return line;
    }
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 || out_fd_ < 0) return "";
    pollfd p{out_fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno != EINTR) return "";
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return "";
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

std::string ChildProcess::read_all() {
  std::string out = std::move(buffered_);
  buffered_.clear();
  if (out_fd_ < 0) return out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Result<std::pair<ExitStatus, std::string>> run_to_exit(const SpawnOptions& options) {
  TS_ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::spawn(options));
  std::string out = child.read_all();
  const ExitStatus st = child.wait();
  return std::make_pair(st, std::move(out));
}

}  // namespace tessera
