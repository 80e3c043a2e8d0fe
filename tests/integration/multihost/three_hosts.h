// The three-host cluster of docs/deploy.md, on network namespaces (tessera/testing/netns.h):
//
//   host-a 10.77.0.1   tessera-scheduler sched-a, tessera-frontend, tessera-kvstore, worker w1
//   host-b 10.77.0.2   tessera-scheduler sched-b, tessera-frontend, tessera-kvstore, worker w2,
//                      redis-server redis-b (a shard of the kvstores' L2)
//   host-c 10.77.0.3   workers w3 (-> sched-a) and w4 (-> sched-b), redis-server redis-c (the
//                      other shard)
//   client 10.77.0.100 drives HTTP (threads that enter its namespace)
//
// Every worker lists both schedulers, its own first (w1, w3: sched-a; w2, w4: sched-b), and moves
// to the other one when its own dies or is cut off.
//
// Each program runs with `--config <host dir>/tessera.conf` (a copy of deploy/bare/host-X.conf)
// and `--curve-dir <host dir>/keys`: a key set made with `tessera keys` on an "admin" directory,
// one worker key per host (`tessera keys --role worker --name host-X`), and each host given
// only the files its roles need (docs/security.md). Faster failure detection than the
// defaults (heartbeats 100 ms, peers dead after 1 s) keeps the fault tests short.
//
// Ownership: owns the bed (namespaces, every process) and the temporary directory. Not
// thread-safe, except get/post/metric, which may be called from several threads.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/http/client.h"
#include "tessera/testing/netns.h"
#include "tessera/testing/process.h"

namespace tessera::testing {

// Ports of the walkthrough (deploy/bare/host-*.conf).
inline constexpr int kHttpPort = 8000;
inline constexpr int kSchedulerMetricsPort = 8102;
inline constexpr int kKvstoreMetricsPort = 8104;
inline constexpr const char* kKvstoreSecret = "walkthrough-secret";
inline constexpr const char* kAdminToken = "walkthrough-admin";  // the frontends' --admin-token

class ThreeHosts {
 public:
  // Builds the bed and starts everything; ok() once both frontends are ready and each
  // scheduler has its two workers. Failures are reported with ADD_FAILURE and the logs.
  ThreeHosts();
  ~ThreeHosts();
  bool ok() const { return ok_; }

  NetBed& bed() { return *bed_; }
  NetHost& host(const std::string& label) { return bed_->host(label); }  // "a", "b", "c", "client"
  const std::string& dir() const { return dir_; }
  std::string host_dir(const std::string& label) const { return dir_ + "/host-" + label; }
  const std::string& admin_keys() const { return admin_keys_; }

  // Processes by name: "sched-a", "sched-b", "frontend-a", "frontend-b", "kvstore-a",
  // "kvstore-b", "w1".."w4", "redis-b", "redis-c".
  Process& process(const std::string& name) { return *processes_.at(name); }
  // (Re)starts one of them on its host with its walkthrough command; true once it printed its
  // start-up line (workers: once started; use live_workers() for registration).
  bool start(const std::string& name);
  // SIGKILLs it and waits for the exit.
  void kill(const std::string& name);
  // Undoes whatever a test left: every link up without netem, every process continued
  // (SIGCONT) and restarted when it has exited, and every worker that moved to the other
  // scheduler restarted (so it registers with its own again).
  void repair();
  // The host of a process ("a", "b", "c") and a worker's metrics address (ip, port).
  static std::string host_of(const std::string& name);
  static std::pair<std::string, int> worker_metrics(const std::string& worker);

  // HTTP from the client host to `ip:port`.
  Result<http::Response> request(http::Request r) const;
  Result<http::Response> post(const std::string& ip, const std::string& path, const std::string& json,
                              int timeout_ms = 30000) const;
  Result<http::Response> get(const std::string& ip, int port, const std::string& path, int timeout_ms = 5000) const;
  // Sum of the samples `name` containing `filter` from http://ip:port/metrics; NaN when unreadable.
  double metric(const std::string& ip, int port, const std::string& name, const std::string& filter = "") const;
  // tessera_scheduler_live_workers of sched-a ("a") or sched-b ("b").
  double live_workers(const std::string& sched_host) const;
  // True once both schedulers have 2 live workers, both kvstores reach every Redis shard and
  // both frontends answer /ready 200.
  bool settled(std::chrono::milliseconds timeout);

  std::string logs() const;  // state() and the tail of every log, for failure messages
  std::string state() const;  // what settled() checks, and each worker's scheduler switches
  // The command line `name` was started with (program and arguments, paths as run), without
  // test_flags(name): the walkthrough's command (docs/deploy.md shows each one).
  const std::vector<std::string>& command(const std::string& name) const { return commands_.at(name); }
  // What the test adds to that command: faster failure detection (heartbeats 100 ms, peers
  // dead after 1 s), a worker size fit for the test machine, the frontends' admin token.
  static std::vector<std::string> test_flags(const std::string& name);
  // Every process name, in start order.
  static std::vector<std::string> names() {
    return {"redis-b", "redis-c", "kvstore-a", "kvstore-b", "sched-a", "sched-b", "w1", "w2", "w3", "w4",
            "frontend-a", "frontend-b"};
  }

 private:
  bool distribute_keys();
  std::vector<std::string> command_for(const std::string& name) const;

  std::string dir_, admin_keys_;
  std::unique_ptr<NetBed> bed_;
  std::map<std::string, Process*> processes_;
  std::map<std::string, std::vector<std::string>> commands_;
  std::map<std::string, int> starts_;
  bool ok_ = false;
};

}  // namespace tessera::testing
