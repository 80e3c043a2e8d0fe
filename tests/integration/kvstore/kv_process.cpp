#include "kv_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "tessera/testing/paths.h"

extern char** environ;

namespace tessera::kvstore::testing {
namespace {

// stdout goes to a pipe (*out_fd); stderr (the log) to the pipe too when log_path is empty,
// else to that file, so a chatty service never blocks on a pipe nobody reads.
pid_t spawn(std::vector<std::string> args, int* out_fd, const std::string& log_path = "") {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const std::string bin = tessera::testing::bin_path("tessera-kvstore");
  args.insert(args.begin(), bin);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  if (log_path.empty()) {
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, bin.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    std::fprintf(stderr, "KvProcess: cannot run %s (errno %d)\n", bin.c_str(), rc);
    return -1;
  }
  *out_fd = fds[0];
  return pid;
}

}  // namespace

std::unique_ptr<KvProcess> KvProcess::start(std::vector<std::string> args, std::chrono::milliseconds deadline) {
  bool has_listen = false;
  for (const auto& a : args) has_listen = has_listen || a.rfind("--listen", 0) == 0;
  if (!has_listen) {
    args.push_back("--listen");
    args.push_back("tcp://127.0.0.1:*");
  }
  std::unique_ptr<KvProcess> p(new KvProcess());
  static int counter = 0;
  const std::string log_path = "/tmp/tessera-kvstore-test-" + std::to_string(::getpid()) + "-" +
                               std::to_string(counter++) + ".log";
  p->log_path_ = log_path;
  p->pid_ = spawn(args, &p->out_fd_, log_path);
  if (p->pid_ < 0) return nullptr;
  const std::string marker = "listening on ";
  std::string out;
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    pollfd pfd{p->out_fd_, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(p->out_fd_, buf, sizeof buf);
    if (n <= 0) break;  // exited
    out.append(buf, static_cast<size_t>(n));
    const size_t at = out.find(marker);
    if (at != std::string::npos) {
      const size_t end = out.find_first_of(" \n", at + marker.size());
      if (end != std::string::npos) {
        p->endpoint_ = out.substr(at + marker.size(), end - at - marker.size());
        ::fcntl(p->out_fd_, F_SETFL, O_NONBLOCK);
        return p;
      }
    }
  }
  std::fprintf(stderr, "KvProcess: tessera-kvstore did not come up; output:\n%s\n(log: %s)\n", out.c_str(),
               log_path.c_str());
  return nullptr;
}

bool KvProcess::alive() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

KvProcess::~KvProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (!log_path_.empty()) ::unlink(log_path_.c_str());
}

std::pair<int, std::string> KvProcess::run_to_exit(std::vector<std::string> args) {
  int fd = -1;
  const pid_t pid = spawn(std::move(args), &fd);
  if (pid < 0) return {-1, "spawn failed"};
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace tessera::kvstore::testing
