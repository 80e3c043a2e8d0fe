// Harness for the end-to-end cluster tests: real tessera-scheduler, tessera-worker and
// tessera-frontend processes (testing::Process), secured with the test key set (curve_keys.h),
// on loopback ports chosen by the OS (each prints
// one LISTENING/READY line with what it bound), HTTP through the one client (tessera/http/client.h),
// Prometheus samples, and deadline-bounded waits (wait.h; never a blind sleep).
//
// Ownership: a Cluster owns its processes and their log directory; the destructor stops them
// (SIGTERM, 5 s each, then SIGKILL). Not thread-safe, except post/get/metric, which only read
// the ports and may be called from several threads.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/http/client.h"
#include "tessera/testing/process.h"
#include "tessera/testing/wait.h"

namespace tessera::testing {

using std::chrono::milliseconds;

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
  // The frontend's --scheduler-dead-ms: long, so that a loaded machine (or ASan) delaying a
  // heartbeat never declares the scheduler dead mid-test; a killed scheduler is noticed at once
  // anyway (the frontend's socket monitor sees its connection drop). Set it short only in a
  // test of death by silence.
  int frontend_scheduler_dead_ms = 10000;
  std::vector<std::string> scheduler_args;
  std::vector<std::string> worker_args;
  std::vector<std::string> frontend_args;  // appended to tessera-frontend's (e.g. --api-keys-file)
  // Every worker's --min-step-ms (pacing, docs/operations.md "Pacing"; 0 = off): a test that must
  // catch a request mid-stream (freeze, kill, cancel) sets kPacedStepMs so that N tokens last
  // at least N x 10 ms whatever the machine's load or sanitizer.
  int worker_min_step_ms = 0;
};

// The pacing of tests that act on a request while it runs: 300 tokens last at least 3 s.
inline constexpr int kPacedStepMs = 10;

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
  Process& scheduler() { return *scheduler_; }
  const std::string& scheduler_listening() const { return sched_line_; }  // its LISTENING line (line_field())
  // SIGKILLs the scheduler and starts a new one on the same frontend and worker endpoints (a new
  // metrics port); true once it prints its LISTENING line. Workers and frontend stay up.
  bool restart_scheduler();
  Process& worker(size_t i = 0) { return *workers_.at(i); }
  size_t num_workers() const { return workers_.size(); }
  Process& frontend() { return *frontend_; }
  std::string logs() const;  // tails of every process's log, for failure messages

  Result<http::Response> post(const std::string& path, const std::string& json, int timeout_ms = 30000) const;
  Result<http::Response> get(const std::string& path, int port = 0, int timeout_ms = 10000) const;
  // Sum of every sample named `name` whose labels contain `label_filter`; NaN when unreadable.
  double metric(int port, const std::string& name, const std::string& label_filter = "") const;

 private:
  bool start_scheduler(const std::string& frontend_endpoint, const std::string& worker_endpoint);

  ClusterOptions options_;
  std::string dir_;
  std::unique_ptr<Process> scheduler_, frontend_;
  std::vector<std::unique_ptr<Process>> workers_;
  int http_port_ = 0;
  int metrics_port_ = 0;
  std::string zmq_endpoint_, sched_fe_, sched_we_, sched_line_;
  bool ok_ = false;
};

// A test suite whose tests share one Cluster (default options), started before the suite's
// first test and stopped after its last: derive the suite's fixture from it.
class SharedClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_ && cluster_->ok()) << "the cluster did not come up"; }
  static inline Cluster* cluster_ = nullptr;  // one suite at a time (gtest runs suites in turn)
};

}  // namespace tessera::testing
