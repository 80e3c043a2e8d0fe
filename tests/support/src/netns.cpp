#include "tessera/testing/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tessera/common/check.h"
#include "tessera/common/child_process.h"

namespace tessera::testing {

namespace {

constexpr const char* kPrefix = "tessera-bed-";

std::string join(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) out += (out.empty() ? "" : " ") + a;
  return out;
}

Result<std::pair<int, std::string>> run_command(const std::string& binary, const std::vector<std::string>& args) {
  auto r = run_to_exit({.binary = binary,
                        .args = args,
                        .stdout_to = ChildOutput::pipe(),
                        .stderr_to = ChildOutput::same_as_stdout()});
  if (!r.ok()) return r.error();
  return std::pair<int, std::string>{r->first.shell_code(), r->second};
}

// Every process inside namespace `ns` gets SIGKILL.
void kill_inside(const std::string& ns) {
  auto pids = NetBed::ip_output({"netns", "pids", ns});
  if (!pids.ok()) return;
  std::istringstream in(*pids);
  for (long pid = 0; in >> pid;)
    if (pid > 1) ::kill(static_cast<pid_t>(pid), SIGKILL);
}

// Removes namespaces of beds whose test program is gone ("tessera-bed-<pid>-...").
void sweep_stale() {
  auto list = NetBed::ip_output({"netns", "list"});
  if (!list.ok()) return;
  std::istringstream in(*list);
  for (std::string line; std::getline(in, line);) {
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind(kPrefix, 0) != 0) continue;
    const long pid = std::atol(name.c_str() + std::char_traits<char>::length(kPrefix));
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    kill_inside(name);
    (void)NetBed::ip({"netns", "del", name});
  }
}

}  // namespace

// ---- NetHost ----

Process& NetHost::spawn(const std::string& binary, const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<std::string> full = {"netns", "exec", ns_, binary};
  full.insert(full.end(), args.begin(), args.end());
  processes_.push_back(std::make_unique<Process>(NetBed::ip_binary(), full, log_path));
  return *processes_.back();
}

void NetHost::forget(Process& process) {
  std::erase_if(processes_, [&](const std::unique_ptr<Process>& p) { return p.get() == &process; });
}

NetHost::Enter::Enter(const NetHost& host) {
  previous_fd_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  const std::string path = "/run/netns/" + host.ns();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ok_ = previous_fd_ >= 0 && fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0;
  if (!ok_) ADD_FAILURE() << "cannot enter network namespace " << path << ": " << std::strerror(errno);
  if (fd >= 0) ::close(fd);
}

NetHost::Enter::~Enter() {
  if (previous_fd_ < 0) return;
  if (ok_ && ::setns(previous_fd_, CLONE_NEWNET) != 0) std::abort();  // the thread would stay elsewhere
  ::close(previous_fd_);
}

Status NetHost::link_down() { return NetBed::ip({"-n", bed_.switch_ns_, "link", "set", port_, "down"}); }
Status NetHost::link_up() { return NetBed::ip({"-n", bed_.switch_ns_, "link", "set", port_, "up"}); }

Status NetHost::netem(const std::string& spec) {
  std::vector<std::string> args = {"qdisc", "replace", "dev", "eth0", "root", "netem"};
  std::istringstream in(spec);
  for (std::string word; in >> word;) args.push_back(word);
  args.insert(args.begin(), "tc");
  auto r = exec(args);
  args.erase(args.begin());
  if (!r.ok()) return r.error();
  if (r->first == 0) return ok_status();
  if (r->second.find("qdisc kind is unknown") != std::string::npos || r->second.find("No such file") != std::string::npos)
    return make_error(ErrorCode::kUnsupported,
                      "this kernel has no netem queueing discipline (sch_netem; modprobe sch_netem): `tc " + join(args) +
                          "` answered: " + r->second);
  return make_error(ErrorCode::kUnavailable, "tc " + join(args) + ": " + r->second);
}

Status NetHost::clear_netem() {
  auto r = exec({"tc", "qdisc", "del", "dev", "eth0", "root"});
  if (!r.ok()) return r.error();
  return r->first == 0 ? ok_status() : make_error(ErrorCode::kUnavailable, "tc qdisc del: " + r->second);
}

Result<std::pair<int, std::string>> NetHost::exec(const std::vector<std::string>& command) const {
  std::vector<std::string> args = {"netns", "exec", ns_};
  args.insert(args.end(), command.begin(), command.end());
  return run_command(NetBed::ip_binary(), args);
}

// ---- NetBed ----

const std::string& NetBed::ip_binary() {
  static const std::string path = [] {
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
      if (::access(p, X_OK) == 0) return std::string(p);
    return std::string();
  }();
  return path;
}

Status NetBed::ip(const std::vector<std::string>& args) {
  auto r = ip_output(args);
  return r.ok() ? ok_status() : Status(r.error());
}

Result<std::string> NetBed::ip_output(const std::vector<std::string>& args) {
  if (ip_binary().empty()) return make_error(ErrorCode::kUnavailable, "no `ip` program (Debian: iproute2)");
  auto r = run_command(ip_binary(), args);
  if (!r.ok()) return r.error();
  if (r->first != 0)
    return make_error(ErrorCode::kUnavailable, "ip " + join(args) + " failed (" + std::to_string(r->first) + "): " + r->second);
  return std::move(r->second);
}

std::string NetBed::unavailable() {
  if (::geteuid() != 0) return "multi-host tests need root (network namespaces); run as root, as CI does";
  if (ip_binary().empty()) return "multi-host tests need iproute2's `ip` (apt-get install iproute2)";
  if (::access("/proc/self/ns/net", R_OK) != 0) return "this kernel has no network namespaces (/proc/self/ns/net)";
  // One throw-away namespace proves that `ip netns add` works here (e.g. not in a container
  // without CAP_SYS_ADMIN or without a writable /run/netns).
  static std::atomic<int> probe{0};
  const std::string ns = std::string(kPrefix) + std::to_string(::getpid()) + "-probe" + std::to_string(probe++);
  Status st = ip({"netns", "add", ns});
  if (!st.ok()) return "cannot create a network namespace: " + st.error().message;
  (void)ip({"netns", "del", ns});
  return "";
}

NetBed::NetBed(std::string subnet) : subnet_(std::move(subnet)) {
  static std::atomic<int> counter{0};
  prefix_ = std::string(kPrefix) + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-";
  sweep_stale();
  switch_ns_ = prefix_ + "switch";
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"netns", "add", switch_ns_},
           {"-n", switch_ns_, "link", "add", "br0", "type", "bridge"},
           {"-n", switch_ns_, "link", "set", "br0", "up"},
       }) {
    Status st = ip(args);
    if (!st.ok()) {
      error_ = st.error().message;
      break;
    }
  }
}

NetBed::~NetBed() { remove_all(); }

void NetBed::remove_all() {
  for (auto& h : hosts_) {
    // Stop in reverse start order (frontends before the schedulers they reach, and so on).
    while (!h->processes_.empty()) h->processes_.pop_back();
  }
  for (auto& h : hosts_) {
    kill_inside(h->ns_);
    (void)ip({"netns", "del", h->ns_});
  }
  hosts_.clear();
  if (!switch_ns_.empty()) {
    kill_inside(switch_ns_);
    (void)ip({"netns", "del", switch_ns_});
  }
}

NetHost& NetBed::add_host(const std::string& label, int octet) {
  const std::string ns = prefix_ + label;
  const std::string ip_addr = subnet_ + "." + std::to_string(octet);
  hosts_.push_back(std::unique_ptr<NetHost>(new NetHost(*this, label, ns, "p-" + label, ip_addr)));
  NetHost& h = *hosts_.back();
  const std::vector<std::vector<std::string>> steps = {
      {"netns", "add", ns},
      // Made directly inside the two namespaces: no name in the test's own namespace.
      {"link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", h.port_, "netns", switch_ns_},
      {"-n", switch_ns_, "link", "set", h.port_, "master", "br0"},
      {"-n", switch_ns_, "link", "set", h.port_, "up"},
      {"-n", ns, "addr", "add", ip_addr + "/24", "dev", "eth0"},
      {"-n", ns, "link", "set", "eth0", "up"},
      {"-n", ns, "link", "set", "lo", "up"},
  };
  for (const auto& args : steps) {
    Status st = ip(args);
    if (!st.ok()) {
      error_ = st.error().message;
      ADD_FAILURE() << "host " << label << ": " << error_;
      break;
    }
  }
  return h;
}

NetHost& NetBed::host(const std::string& label) {
  for (auto& h : hosts_)
    if (h->label_ == label) return *h;
  TS_CHECK(false) << "no host " << label;
  return *hosts_.front();
}

std::vector<NetHost*> NetBed::hosts() {
  std::vector<NetHost*> out;
  for (auto& h : hosts_) out.push_back(h.get());
  return out;
}

}  // namespace tessera::testing
