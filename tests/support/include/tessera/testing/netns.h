// Hosts for multi-host tests: Linux network namespaces joined by veth pairs to one bridge.
//
//   if (auto why = NetBed::unavailable(); !why.empty()) GTEST_SKIP() << why;
//   NetBed bed;                                   // a "switch" namespace holding bridge br0
//   NetHost& a = bed.add_host("a", 1);            // namespace with eth0 = 10.77.0.1/24, lo up
//   NetHost& client = bed.add_host("client", 100);
//   auto& sched = a.spawn(bin_path("tessera-scheduler"), {...}, dir + "/sched.log");  // ip netns exec
//   client.run([&] { http::request({.host = a.ip(), .port = 8000, ...}); });       // from the client host
//   ASSERT_OK(a.link_down());  ...  ASSERT_OK(a.link_up());     // pull / plug the host's cable
//   Status st = a.netem("delay 20ms loss 5%");    // kUnsupported when the kernel has no sch_netem
//
// Topology: every host's eth0 is one end of a veth pair whose other end (named after the host)
// is a port of bridge br0 in the bed's switch namespace; nothing is added to the namespace the
// test runs in, so addresses (and ports) are private to the bed and parallel runs cannot collide.
// Names: namespaces are "tessera-bed-<pid>-<n>-<label>" (unique per process and bed).
//
// Faults: link_down() sets the host's switch port down — a pulled cable: the host stays up, its
// packets and those sent to it are dropped silently (TCP retransmits, nothing is reset), and
// link_up() restores it. netem() puts a `tc netem` qdisc on the host's eth0.
//
// Clean-up: ~NetBed first destroys the processes spawned through its hosts (SIGTERM, then
// SIGKILL), then SIGKILLs anything still inside a namespace and deletes every namespace (the veth
// pairs and the bridge go with them). It runs on test failures too (RAII); for a test program
// that was killed (a crash, a CTest timeout), the next NetBed of any run removes namespaces
// whose owning process is gone.
//
// Threading: NetBed and NetHost are used from the test's thread, except run()/Enter, which move
// only the calling (or a new) thread into a namespace — setns(2) on a network namespace applies
// per thread, so other threads of the test program stay where they were.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/testing/process.h"

namespace tessera::testing {

class NetBed;

class NetHost {
 public:
  const std::string& label() const { return label_; }
  const std::string& ns() const { return ns_; }   // the namespace's name (ip netns)
  const std::string& ip() const { return ip_; }   // its eth0 address, e.g. "10.77.0.1"

  // Starts `binary args...` inside this host (`ip netns exec NS binary args...`: the same pid,
  // so signals reach the program itself). The bed owns the Process; the reference stays valid
  // until the bed is destroyed (or forget() is called with it).
  Process& spawn(const std::string& binary, const std::vector<std::string>& args, const std::string& log_path = "");
  // Destroys a process this host spawned (it is stopped first if it still runs).
  void forget(Process& process);

  // The calling thread enters this host's network namespace for its lifetime and goes back to
  // the one it was in on destruction. Not movable; use on one thread.
  class Enter {
   public:
    explicit Enter(const NetHost& host);
    ~Enter();
    Enter(const Enter&) = delete;
    Enter& operator=(const Enter&) = delete;
    bool ok() const { return ok_; }

   private:
    int previous_fd_ = -1;
    bool ok_ = false;
  };
  // Runs fn() on a new thread inside this host's namespace and returns its result (sockets it
  // opens belong to this host: connections come from ip()).
  template <class F>
  auto run(F&& fn) -> std::invoke_result_t<F> {
    using R = std::invoke_result_t<F>;
    if constexpr (std::is_void_v<R>) {
      std::thread t([&] {
        Enter in(*this);
        fn();
      });
      t.join();
    } else {
      std::optional<R> out;
      std::thread t([&] {
        Enter in(*this);
        out.emplace(fn());
      });
      t.join();
      return std::move(*out);
    }
  }

  // Link faults (see the header comment). Errors: kUnavailable naming the failed ip command.
  Status link_down();
  Status link_up();
  // `spec` is netem's arguments ("delay 30ms", "loss 10%", "delay 20ms loss 5%"); replaces an
  // earlier one. kUnsupported when the kernel lacks sch_netem (the message says so).
  Status netem(const std::string& spec);
  Status clear_netem();
  // Runs `ip netns exec NS program args...` to completion: its exit code and output.
  Result<std::pair<int, std::string>> exec(const std::vector<std::string>& command) const;

 private:
  friend class NetBed;
  NetHost(NetBed& bed, std::string label, std::string ns, std::string port, std::string ip)
      : bed_(bed), label_(std::move(label)), ns_(std::move(ns)), port_(std::move(port)), ip_(std::move(ip)) {}

  NetBed& bed_;
  std::string label_, ns_, port_, ip_;
  std::vector<std::unique_ptr<Process>> processes_;
};

class NetBed {
 public:
  // "" when beds can be made here; otherwise why not (not root, no `ip`, no netns support),
  // for GTEST_SKIP.
  static std::string unavailable();

  // `subnet` is the first three octets of the hosts' /24 ("10.77.0").
  explicit NetBed(std::string subnet = "10.77.0");
  ~NetBed();
  NetBed(const NetBed&) = delete;
  NetBed& operator=(const NetBed&) = delete;

  // False (with error()) when the switch could not be made.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // A new host `label` (letters/digits, ≤ 8 chars) at <subnet>.<octet>. Fails the test
  // (ADD_FAILURE) and returns the host anyway when a command fails; check ok().
  NetHost& add_host(const std::string& label, int octet);
  NetHost& host(const std::string& label);
  std::vector<NetHost*> hosts();

  // Runs `ip ARGS...` to completion; errors carry ip's output.
  static Status ip(const std::vector<std::string>& args);
  static Result<std::string> ip_output(const std::vector<std::string>& args);
  static const std::string& ip_binary();

 private:
  friend class NetHost;
  void remove_all();

  std::string prefix_;  // "tessera-bed-<pid>-<n>-"
  std::string subnet_;
  std::string switch_ns_;
  std::string error_;
  std::vector<std::unique_ptr<NetHost>> hosts_;
};

}  // namespace tessera::testing
