// Harness for the end-to-end cluster tests: real tessera-scheduler, tessera-worker and
// tessera-frontend processes on loopback ports chosen by the OS (each prints one LISTENING/READY
// line with what it bound), HTTP through tools/src/bench/http_client.h, Prometheus samples, and
// deadline-bounded waits (polling a condition, never a blind sleep).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../../../tools/src/bench/http_client.h"

namespace tessera::cluster_test {

using std::chrono::milliseconds;

// A child process: stdout on a pipe (for its LISTENING line), stderr to a log file.
// The destructor SIGKILLs and reaps it if it is still running.
class Child {
 public:
  Child(const std::string& binary, const std::vector<std::string>& args, const std::string& log_path);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  // The first stdout line starting with `prefix`, or "" at the deadline / EOF.
  std::string wait_line(const std::string& prefix, milliseconds timeout);
  bool alive();
  void signal(int sig);
  // Waits for exit; the exit status (WEXITSTATUS, or 128 + signal), -1 at the deadline.
  int wait_exit(milliseconds timeout);
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int status_ = -1;
  bool reaped_ = false;
  std::string buffered_;
  std::string log_path_;
};

// The value of `field=` in a LISTENING line ("" when absent).
std::string line_field(const std::string& line, const std::string& field);

// Polls pred() every few milliseconds until it holds or the deadline passes.
bool wait_until(const std::function<bool()>& pred, milliseconds timeout);

// ../shared/models/stories260K/greedy.json: a generation of at least `steps` new tokens from
// `prompt` (temperature 0) must begin with `completion`.
struct GreedyCase {
  std::string prompt;
  int steps = 0;
  std::string completion;
};
std::vector<GreedyCase> greedy_cases();

struct ClusterOptions {
  bool prefix_cache = true;
  int worker_dead_ms = 3000;
  int num_pages = 512;
  int max_prompt_tokens = 400;       // frontend limit (413 above it)
  int num_workers = 1;               // named w0, w1, ...
  int frontend_scheduler_dead_ms = 1000;  // the frontend's --scheduler-dead-ms
  std::vector<std::string> scheduler_args;
  std::vector<std::string> worker_args;
};

class Cluster {
 public:
  // Starts scheduler, worker (stories260K, 1 thread) and frontend; waits until /ready is 200.
  // Fails the calling test (ADD_FAILURE) and leaves ok() false when something does not come up.
  explicit Cluster(const ClusterOptions& options = {});
  ~Cluster();
  bool ok() const { return ok_; }

  int http_port() const { return http_port_; }
  int metrics_port() const { return metrics_port_; }           // the scheduler's /metrics
  const std::string& zmq_endpoint() const { return zmq_endpoint_; }          // frontend client API
  const std::string& scheduler_frontend_endpoint() const { return sched_fe_; }
  const std::string& scheduler_worker_endpoint() const { return sched_we_; }
  Child& scheduler() { return *scheduler_; }
  // SIGKILLs the scheduler and starts a new one on the same frontend and worker endpoints (a new
  // metrics port); true once it prints its LISTENING line. Workers and frontend stay up.
  bool restart_scheduler();
  Child& worker(size_t i = 0) { return *workers_.at(i); }
  size_t num_workers() const { return workers_.size(); }
  Child& frontend() { return *frontend_; }
  std::string logs() const;  // tails of every process's log, for failure messages

  Result<bench::HttpResponse> post(const std::string& path, const std::string& json, int timeout_ms = 30000) const;
  Result<bench::HttpResponse> get(const std::string& path, int port = 0, int timeout_ms = 10000) const;
  // Sum of every sample named `name` whose labels contain `label_filter`; NaN when unreadable.
  double metric(int port, const std::string& name, const std::string& label_filter = "") const;

 private:
  bool start_scheduler(const std::string& frontend_endpoint, const std::string& worker_endpoint);

  ClusterOptions options_;
  std::string dir_;
  std::unique_ptr<Child> scheduler_, frontend_;
  std::vector<std::unique_ptr<Child>> workers_;
  int http_port_ = 0;
  int metrics_port_ = 0;
  std::string zmq_endpoint_, sched_fe_, sched_we_;
  bool ok_ = false;
};

}  // namespace tessera::cluster_test
