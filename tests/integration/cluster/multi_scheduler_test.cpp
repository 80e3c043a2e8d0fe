// Several schedulers done right (issue 14): real tessera-scheduler, -worker and -frontend
// processes on loopback, CURVE on, stories260K.
//
// Three schedulers, one worker each (the worker lists all three: --scheduler a,b,c; for two of
// them the name is chosen so that their first choice — discovery::FailoverOrder, the worker's
// own rule — is "their" scheduler; the third uses --scheduler-order listed), two frontends reading the scheduler list from a file (--schedulers file:PATH):
// 1. membership without restarts: the file first lists two schedulers, then three; both
//    frontends take the third into their ring;
// 2. one hot prefix: 40 concurrent requests sharing a system prompt (one routing key) spread over
//    the schedulers within the bound (max <= ceil(1.25 x 40 / 3)); the other frontend picks the
//    same owner for that key; each scheduler ended exactly the requests routed to it;
// 3. killing the busiest scheduler mid-batch: its worker registers with another scheduler within
//    the documented bound, every request that had not streamed is answered in full (the frontend
//    resubmits it), and the metrics count exactly the requests that were on it;
// 4. (second test) a frozen scheduler: the same, found by silence;
// 5. (third test) a scheduler taken out of the list finishes its requests;
// 6. (fourth test) a scheduler stopped with SIGTERM under load from both client APIs (HTTP and
//    the ZeroMQ client API, streamed and not) drains: every request it had not started is
//    answered in full elsewhere, the running ones (streamed included) finish on it, none fails.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "tessera/common/discovery.h"
#include "tessera/common/hash_ring.h"
#include "tessera/common/metrics.h"
#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/http/client.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/process.h"
#include "tessera/testing/wait.h"

namespace tessera::testing {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr int kWorkerDeadMs = 1000;  // the workers' --scheduler-dead-ms: the re-registration bound's base
// The workers' --min-step-ms (docs/operations.md "Pacing"): a request of 120 tokens lasts at
// least 1.2 s, so "all N in flight at once" is reached, and holds while the test acts on it,
// whatever the machine's load (unpaced, a request is over in 20-100 ms).
constexpr int kPaceMs = 10;

std::string tail(const std::string& path, size_t bytes = 2500) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

void write_list(const std::string& path, const std::vector<std::string>& endpoints) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    for (const auto& e : endpoints) out << e << "\n";
  }
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0);
}

// One scrape of /metrics (empty when unreadable).
std::vector<metrics::Sample> scrape(int port) {
  auto r = http::request({.port = port, .path = "/metrics", .timeout_ms = 5000});
  if (!r.ok() || r->status != 200) return {};
  auto samples = metrics::parse_text(r->body);
  return samples.ok() ? std::move(*samples) : std::vector<metrics::Sample>{};
}

// Samples of `name` whose labels contain `filter`, summed; NaN when there is none.
double sum(const std::vector<metrics::Sample>& samples, const std::string& name, const std::string& filter = "") {
  double total = 0;
  bool found = false;
  for (const auto& s : samples)
    if (s.name == name && s.labels.find(filter) != std::string::npos) {
      total += s.value;
      found = true;
    }
  return found ? total : std::nan("");
}

double metric(int port, const std::string& name, const std::string& filter = "") { return sum(scrape(port), name, filter); }

struct Sched {
  std::unique_ptr<Process> proc;
  std::string fe, we;  // frontend and worker endpoints
  int metrics = 0;
};

class MultiScheduler : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("tessera-multisched");
    model_ = shared_path("models/stories260K/stories260K.bin");
    tok_ = shared_path("models/stories260K/tok512.bin");
    for (int s = 0; s < 3; ++s) {
      Sched x;
      x.proc = std::make_unique<Process>(
          bin_path("tessera-scheduler"),
          with_keys([&] {
            std::vector<std::string> args = {"--frontend-endpoint", "tcp://127.0.0.1:*", "--worker-endpoint", "tcp://127.0.0.1:*",
                                             "--metrics-port", "0", "--heartbeat-ms", "100", "--worker-dead-ms", "1000", "--name",
                                             "s" + std::to_string(s)};
            args.insert(args.end(), sched_extra_.begin(), sched_extra_.end());
            return args;
          }()),
          dir_ + "/s" + std::to_string(s) + ".log");
      const std::string line = x.proc->wait_line("LISTENING", milliseconds(10000));
      ASSERT_FALSE(line.empty()) << "scheduler " << s << " did not start\n" << logs();
      x.fe = line_field(line, "frontends");
      x.we = line_field(line, "workers");
      x.metrics = std::atoi(line_field(line, "metrics").c_str());
      scheds_.push_back(std::move(x));
    }
    // One worker per scheduler: a name whose first choice (the worker's own rule) is that one.
    std::vector<std::string> wes;
    for (const auto& s : scheds_) wes.push_back(s.we);
    std::string list;
    for (const auto& e : wes) list += (list.empty() ? "" : ",") + e;
    for (size_t s = 0; s < scheds_.size(); ++s) {
      std::string name;
      std::vector<std::string> extra;
      std::string own_list = list;
      if (s == 2) {  // the last one by --scheduler-order listed: its list starts with its scheduler
        name = "wl2";
        extra = {"--scheduler-order", "listed"};
        own_list = wes[2] + "," + wes[0] + "," + wes[1];
      }
      for (int k = 0; name.empty(); ++k) {
        discovery::FailoverOrder order("w" + std::to_string(k), milliseconds(1000));
        order.set_endpoints(wes);
        if (order.choose(Clock::now()) == wes[s] &&
            std::none_of(worker_names_.begin(), worker_names_.end(), [&](const auto& n) { return n == "w" + std::to_string(k); }))
          name = "w" + std::to_string(k);
      }
      worker_names_.push_back(name);
      workers_.push_back(std::make_unique<Process>(
          bin_path("tessera-worker"),
          with_keys([&] {
            std::vector<std::string> args = {"--model", model_, "--scheduler", own_list, "--threads", "1", "--num-pages",
                                             "512", "--name", name, "--backend", "cpu", "--scheduler-dead-ms",
                                             std::to_string(kWorkerDeadMs), "--metrics-port", "0", "--min-step-ms",
                                             std::to_string(kPaceMs)};
            args.insert(args.end(), extra.begin(), extra.end());
            return args;
          }()),
          dir_ + "/" + name + ".log"));
      const std::string ready = workers_.back()->wait_line("READY", milliseconds(15000));
      ASSERT_FALSE(ready.empty()) << "worker " << name << " did not start\n" << logs();
      worker_metrics_.push_back(std::atoi(line_field(ready, "metrics").c_str()));
    }
    for (size_t s = 0; s < scheds_.size(); ++s) {
      ASSERT_TRUE(wait_until([&] { return metric(scheds_[s].metrics, "tessera_scheduler_live_workers") == 1.0; },
                             milliseconds(15000)))
          << "scheduler s" << s << " did not get its worker " << worker_names_[s] << "\n" << logs();
    }
    list_path_ = dir_ + "/schedulers";
    write_list(list_path_, {scheds_[0].fe, scheds_[1].fe});
    for (int f = 0; f < 2; ++f) {
      frontends_.push_back(std::make_unique<Process>(
          bin_path("tessera-frontend"),
          with_keys({"--http-port", "0", "--zmq-endpoint", zmq_ ? "tcp://127.0.0.1:*" : "", "--schedulers", "file:" + list_path_,
                     "--scheduler-refresh-ms", "200", "--model", model_, "--tokenizer", tok_, "--heartbeat-ms", "100",
                     "--scheduler-dead-ms", "1000"}),
          dir_ + "/f" + std::to_string(f) + ".log"));
      const std::string line = frontends_.back()->wait_line("LISTENING", milliseconds(15000));
      ASSERT_FALSE(line.empty()) << "frontend " << f << " did not start\n" << logs();
      http_.push_back(std::atoi(line_field(line, "http").c_str()));
      zmq_endpoints_.push_back(line_field(line, "zmq"));
    }
  }

  void TearDown() override {
    if (HasFailure()) std::cerr << logs();
  }

  std::string logs() const {
    std::string out;
    for (const char* n : {"s0", "s1", "s2", "f0", "f1"}) out += std::string("---- ") + n + ".log\n" + tail(dir_ + "/" + n + ".log");
    for (const auto& w : worker_names_) out += "---- " + w + ".log\n" + tail(dir_ + "/" + w + ".log");
    return out;
  }

  double usable(int f) { return metric(http_[f], "tessera_frontend_schedulers", "state=\"usable\""); }
  double routed(int f, size_t s) {
    return metric(http_[f], "tessera_frontend_scheduler_routed_requests_total", "scheduler=\"" + scheds_[s].fe + "\"");
  }

  // `n` concurrent non-streamed completions sharing one system prompt (so one routing key:
  // its first 64 tokens), each 120 tokens long; returns the HTTP answers.
  static constexpr const char* kSystem =
      "You are a storyteller. Once upon a time there was a little girl named Lily who lived in a small house near the "
      "big forest with her mother, her father and a fluffy dog called Max. Every day they walked to the river. ";
  std::vector<Result<http::Response>> batch(int f, int n, std::atomic<int>* started = nullptr) {
    const std::string system = kSystem;
    std::vector<Result<http::Response>> out(n, make_error(ErrorCode::kInternal, "not run"));
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        json body = {{"prompt", system + "Story " + std::to_string(i) + ":"},
                     {"max_tokens", 120}, {"temperature", 0}, {"ignore_eos", true}};
        if (started) started->fetch_add(1);
        out[i] = http::request({.port = http_[f], .method = "POST", .path = "/v1/completions", .body = body.dump(),
                                .timeout_ms = 60000});
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }

  std::vector<std::string> sched_extra_;  // more scheduler options (set before SetUp)
  bool zmq_ = false;                      // frontends serve the ZeroMQ client API too
  std::vector<std::string> zmq_endpoints_;
  std::string dir_, model_, tok_, list_path_;
  std::vector<Sched> scheds_;
  std::vector<std::string> worker_names_;
  std::vector<int> worker_metrics_;
  std::vector<std::unique_ptr<Process>> workers_, frontends_;
  std::vector<int> http_;
};

int completion_tokens(const Result<http::Response>& r) {
  if (!r.ok() || r->status != 200) return -1;
  auto j = json::parse(r->body, nullptr, false);
  return j.is_discarded() ? -1 : j["usage"]["completion_tokens"].get<int>();
}

TEST_F(MultiScheduler, HotPrefixSpreadsWithinTheBoundAndAKilledSchedulerLosesNothing) {
  // 1. Membership from the file: two schedulers, then a third joins without a restart. The first
  //    is named through DNS (a dns: line of the file; localhost resolves to 127.0.0.1, the address
  //    it listens on), so its ring name is the same endpoint.
  for (int f = 0; f < 2; ++f) ASSERT_TRUE(wait_until([&] { return usable(f) == 2.0; }, milliseconds(10000))) << logs();
  const std::string port0 = scheds_[0].fe.substr(scheds_[0].fe.rfind(':') + 1);
  ASSERT_EQ(scheds_[0].fe, "tcp://127.0.0.1:" + port0);
  write_list(list_path_, {"dns:localhost:" + port0, scheds_[1].fe, scheds_[2].fe});
  for (int f = 0; f < 2; ++f) {
    ASSERT_TRUE(wait_until([&] { return usable(f) == 3.0; }, milliseconds(10000))) << "frontend f" << f << "\n" << logs();
    EXPECT_EQ(metric(http_[f], "tessera_frontend_scheduler_membership_changes_total", "change=\"joined\""), 3.0);
  }

  // 2. One hot prefix over three schedulers.
  auto first = batch(0, 40);
  for (const auto& r : first) ASSERT_EQ(completion_tokens(r), 120) << (r.ok() ? r->body : r.error().to_string());
  std::vector<double> counts;
  for (size_t s = 0; s < 3; ++s) counts.push_back(routed(0, s));
  const double total = counts[0] + counts[1] + counts[2];
  EXPECT_EQ(total, 40.0);
  const double max = *std::max_element(counts.begin(), counts.end());
  const double cap = static_cast<double>(HashRing::capacity(40, 3, 0.25));  // ceil(1.25 x 40 / 3) = 17
  std::printf("40 requests of one prefix over 3 schedulers: %g / %g / %g (max/mean %.3f, cap %g)\n", counts[0], counts[1],
              counts[2], max / (total / 3), cap);
  EXPECT_LE(max, cap) << "the load bound between schedulers";
  for (double c : counts) EXPECT_GE(c, 1.0) << "every scheduler took part of the hot prefix";
  // The key's owner took its requests as owner (and is filled first), the others by spill.
  size_t owner = 3;
  for (size_t s = 0; s < 3; ++s) {
    const double as_owner = metric(http_[0], "tessera_frontend_scheduler_routed_requests_total",
                                   "scheduler=\"" + scheds_[s].fe + "\",reason=\"owner\"");
    if (as_owner > 0) {
      EXPECT_EQ(owner, 3u) << "one owner for one key";
      owner = s;
      EXPECT_EQ(as_owner, counts[s]);
    }
  }
  ASSERT_LT(owner, 3u);
  EXPECT_EQ(counts[owner], max);
  // The other frontend, idle, sends the same prefix to the same owner (same ring, same key).
  auto one = batch(1, 1);
  ASSERT_EQ(completion_tokens(one[0]), 120);
  EXPECT_EQ(routed(1, owner), 1.0) << "both frontends agree on the key's owner";
  // Each scheduler ended exactly the requests routed to it.
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_TRUE(wait_until([&] { return metric(scheds_[s].metrics, "tessera_scheduler_requests_total") == routed(0, s) + routed(1, s); },
                           milliseconds(5000)))
        << "scheduler s" << s;
  }

  // 3. Kill the busiest scheduler while a second batch runs on it.
  const size_t victim = owner;
  const double requeued_before = metric(http_[0], "tessera_frontend_requeued_requests_total");
  const double dead_before = metric(http_[0], "tessera_frontend_peer_dead_requests_total");
  std::atomic<int> started{0};
  std::vector<Result<http::Response>> second;
  std::thread client([&] { second = batch(0, 40, &started); });
  double on_victim = 0;
  const bool loaded = wait_until(
      [&] {
        // One scrape: both figures of the same moment. on_victim cannot change between it and the
        // kill below: the paced workers (kPaceMs) need >= 1.2 s for a request's 120 tokens.
        const auto samples = scrape(http_[0]);
        on_victim = sum(samples, "tessera_frontend_scheduler_inflight", "scheduler=\"" + scheds_[victim].fe + "\"");
        return sum(samples, "tessera_frontend_scheduler_inflight") == 40.0;
      },
      milliseconds(20000), milliseconds(2));
  scheds_[victim].proc->signal(SIGKILL);
  const auto killed = Clock::now();
  EXPECT_TRUE(loaded) << "the 40 requests were not all in flight";
  EXPECT_GE(on_victim, 1.0);
  // Its worker registers with another scheduler within the bound (--scheduler-dead-ms + 1 s).
  const std::string moved = worker_names_[victim];
  const bool rehomed = wait_until(
      [&] {
        double live = 0;
        for (size_t s = 0; s < 3; ++s)
          if (s != victim) live += metric(scheds_[s].metrics, "tessera_scheduler_live_workers");
        return live == 3.0;
      },
      scaled(milliseconds(kWorkerDeadMs + 1000)), milliseconds(5));
  const double rehome_ms = std::chrono::duration<double, std::milli>(Clock::now() - killed).count();
  EXPECT_TRUE(rehomed) << "worker " << moved << " did not register elsewhere within " << scaled(kWorkerDeadMs + 1000.0) << " ms\n" << logs();
  std::printf("scheduler killed with %g requests on it: its worker registered elsewhere after %.0f ms\n", on_victim, rehome_ms);
  client.join();
  for (const auto& r : second) EXPECT_EQ(completion_tokens(r), 120) << (r.ok() ? r->body : r.error().to_string());
  EXPECT_EQ(metric(http_[0], "tessera_frontend_peer_dead_requests_total") - dead_before, on_victim);
  EXPECT_EQ(metric(http_[0], "tessera_frontend_requeued_requests_total") - requeued_before, on_victim)
      << "every request on the killed scheduler was submitted again";
  EXPECT_EQ(metric(worker_metrics_[victim], "tessera_worker_scheduler_switches_total"), 1.0);
  EXPECT_EQ(usable(0), 2.0);
  // The survivors ended everything routed to them.
  for (size_t s = 0; s < 3; ++s) {
    if (s == victim) continue;
    EXPECT_TRUE(wait_until([&] { return metric(scheds_[s].metrics, "tessera_scheduler_requests_total") == routed(0, s) + routed(1, s); },
                           milliseconds(5000)))
        << "scheduler s" << s;
  }
}

// A frozen scheduler (SIGSTOP: its sockets stay open, so only silence tells) loses its worker to
// another scheduler within --scheduler-dead-ms + 1 s, the frontends take it out of their ring
// after their --scheduler-dead-ms, and the requests that were on it are answered elsewhere. When
// it resumes it has no worker left, so it leaves the ring (after --worker-dead-ms: it first
// reads the heartbeats its worker queued before moving on).
TEST_F(MultiScheduler, AFrozenSchedulerIsLeftWithinTheBound) {
  write_list(list_path_, {scheds_[0].fe, scheds_[1].fe, scheds_[2].fe});
  for (int f = 0; f < 2; ++f) ASSERT_TRUE(wait_until([&] { return usable(f) == 3.0; }, milliseconds(10000))) << logs();
  std::vector<Result<http::Response>> answers;
  std::thread client([&] { answers = batch(0, 12); });
  ASSERT_TRUE(wait_until([&] { return metric(http_[0], "tessera_frontend_scheduler_inflight") == 12.0; }, milliseconds(20000),
                         milliseconds(2)));
  size_t victim = 0;  // a scheduler with requests on it
  for (size_t s = 0; s < 3; ++s)
    if (metric(http_[0], "tessera_frontend_scheduler_inflight", "scheduler=\"" + scheds_[s].fe + "\"") > 0) victim = s;
  scheds_[victim].proc->signal(SIGSTOP);
  const auto frozen = Clock::now();
  const bool rehomed = wait_until(
      [&] {
        double live = 0;
        for (size_t s = 0; s < 3; ++s)
          if (s != victim) live += metric(scheds_[s].metrics, "tessera_scheduler_live_workers");
        return live == 3.0;
      },
      scaled(milliseconds(kWorkerDeadMs + 1000 + 1000)), milliseconds(5));
  const double rehome_ms = std::chrono::duration<double, std::milli>(Clock::now() - frozen).count();
  std::printf("scheduler frozen: its worker registered elsewhere after %.0f ms (bound: --scheduler-dead-ms %d + one "
              "register round trip)\n", rehome_ms, kWorkerDeadMs);
  EXPECT_TRUE(rehomed) << logs();
  EXPECT_LE(rehome_ms, scaled(kWorkerDeadMs + 1000 + 500.0))
      << "--scheduler-dead-ms + the register interval (+ scrape slack; x TESSERA_TIMING_SCALE)";
  EXPECT_TRUE(wait_until([&] { return usable(0) == 2.0 && usable(1) == 2.0; }, milliseconds(3000)));
  client.join();
  for (const auto& r : answers) EXPECT_EQ(completion_tokens(r), 120) << (r.ok() ? r->body : r.error().to_string());
  scheds_[victim].proc->signal(SIGCONT);
  EXPECT_TRUE(wait_until([&] { return metric(scheds_[victim].metrics, "tessera_scheduler_live_workers") == 0.0; },
                         milliseconds(5000)))
      << "the resumed scheduler must let its departed worker go";
  // Resumed, it first reads the heartbeats its worker sent before leaving (queued in its socket)
  // and advertises it again until --worker-dead-ms passes; then it is out of the rings for good.
  EXPECT_TRUE(wait_until([&] { return usable(0) == 2.0 && usable(1) == 2.0; }, milliseconds(3000)))
      << "a scheduler without a worker is out of the ring";
  auto more = batch(1, 4);
  for (const auto& r : more) EXPECT_EQ(completion_tokens(r), 120);
  EXPECT_EQ(routed(1, victim), 0.0);
}

// A scheduler taken out of the list (a pod leaving the headless Service's records) takes no new
// request but finishes the ones it has: none fails, none is resubmitted; its link closes after.
TEST_F(MultiScheduler, AnUnlistedSchedulerFinishesItsRequests) {
  write_list(list_path_, {scheds_[0].fe, scheds_[1].fe, scheds_[2].fe});
  for (int f = 0; f < 2; ++f) ASSERT_TRUE(wait_until([&] { return usable(f) == 3.0; }, milliseconds(10000))) << logs();
  std::vector<Result<http::Response>> answers;
  std::thread client([&] { answers = batch(0, 12); });
  ASSERT_TRUE(wait_until([&] { return metric(http_[0], "tessera_frontend_scheduler_inflight") == 12.0; }, milliseconds(20000),
                         milliseconds(2)));
  size_t leaving = 0;
  double on_it = 0;
  for (size_t s = 0; s < 3; ++s) {
    const double n = metric(http_[0], "tessera_frontend_scheduler_inflight", "scheduler=\"" + scheds_[s].fe + "\"");
    if (n > on_it) {
      on_it = n;
      leaving = s;
    }
  }
  std::vector<std::string> rest;
  for (size_t s = 0; s < 3; ++s)
    if (s != leaving) rest.push_back(scheds_[s].fe);
  write_list(list_path_, rest);
  EXPECT_TRUE(wait_until([&] { return metric(http_[0], "tessera_frontend_schedulers", "state=\"listed\"") == 2.0; },
                         milliseconds(5000)));
  client.join();
  for (const auto& r : answers) EXPECT_EQ(completion_tokens(r), 120) << (r.ok() ? r->body : r.error().to_string());
  EXPECT_EQ(metric(http_[0], "tessera_frontend_peer_dead_requests_total"), 0.0);
  EXPECT_EQ(metric(http_[0], "tessera_frontend_requeued_requests_total"), 0.0);
  EXPECT_EQ(metric(http_[0], "tessera_frontend_scheduler_membership_changes_total", "change=\"left\""), 1.0);
  EXPECT_TRUE(wait_until([&] { return metric(http_[0], "tessera_frontend_scheduler_up", "endpoint=\"" + scheds_[leaving].fe + "\"") == 0.0; },
                         milliseconds(5000)))
      << "its link is closed once its requests ended";
  const double before = routed(0, leaving);
  auto more = batch(0, 6);
  for (const auto& r : more) EXPECT_EQ(completion_tokens(r), 120);
  EXPECT_EQ(routed(0, leaving), before) << "no new request for an unlisted scheduler";
  EXPECT_EQ(metric(scheds_[leaving].metrics, "tessera_scheduler_requests_total"), on_it) << "it ended what it had";
}

// Drain (docs/operations.md "Stopping a scheduler"): at most 4 running per worker, so a loaded
// scheduler has queued requests to hand back when it gets SIGTERM.
class MultiSchedulerDrain : public MultiScheduler {
 protected:
  void SetUp() override {
    sched_extra_ = {"--max-running", "4", "--drain-timeout-s", "60"};
    zmq_ = true;
    MultiScheduler::SetUp();
  }
};

struct ZmqAnswer {
  bool stream = false;
  int streamed_tokens = 0;  // tokens of its token events
  int final_tokens = -1;    // usage.completion_tokens of its final
  std::string finish;       // finish_reason, or "error: ..."
};

// `n` completions (ids 1..n, the odd ones streamed) on one DEALER connection to a frontend's
// client API, all in flight at once, sharing the system prompt of batch(); each ends with its
// final or error event.
std::vector<ZmqAnswer> zmq_batch(const std::string& endpoint, int n, const std::string& system) {
  std::vector<ZmqAnswer> out(static_cast<size_t>(n));
  zmq::context_t ctx;
  zmq::socket_t sock(ctx, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::linger, 0);
  sock.set(zmq::sockopt::rcvtimeo, 60000);
  sock.connect(endpoint);
  for (int i = 1; i <= n; ++i) {
    protocol::GenerateRequest r;
    r.id = static_cast<uint64_t>(i);
    r.prompt = system + "Story z" + std::to_string(i) + ":";
    r.max_tokens = 120;
    r.ignore_eos = true;
    r.stream = i % 2 == 1;
    r.sampling.temperature = 0;
    out[static_cast<size_t>(i - 1)].stream = r.stream;
    EXPECT_TRUE(zmqu::send(sock, {protocol::encode(r)}).ok());
  }
  for (int open = n; open > 0;) {
    auto frames = zmqu::recv(sock);
    if (!frames.ok() || frames->empty()) break;  // the answers missing stay finish ""
    auto msg = protocol::decode(frames->back());
    if (!msg.ok()) continue;
    const uint64_t id = protocol::message_id(*msg);
    if (id < 1 || id > static_cast<uint64_t>(n)) continue;
    ZmqAnswer& a = out[id - 1];
    if (auto* tok = std::get_if<protocol::TokenEvent>(&*msg)) a.streamed_tokens += static_cast<int>(tok->tokens.size());
    if (auto* fin = std::get_if<protocol::FinalEvent>(&*msg)) {
      a.final_tokens = fin->usage.completion_tokens;
      a.finish = fin->finish_reason;
      --open;
    }
    if (auto* err = std::get_if<protocol::ErrorEvent>(&*msg)) {
      a.finish = "error: " + err->message;
      --open;
    }
  }
  return out;
}

int drained_field(const std::string& line, const std::string& key) {
  const std::string v = line_field(line, key);
  return v.empty() ? -1 : std::atoi(v.c_str());
}

// SIGTERM to the busiest of three schedulers while 24 HTTP requests (one frontend) and 24
// ZeroMQ client-API requests (the other; half streamed) run: it tells the frontends at once
// (draining heartbeat), hands its queued requests back, finishes its running ones and exits;
// every request ends with its full answer; the frontends submitted again exactly the requests
// it handed back or refused, and nothing failed for a lost connection.
TEST_F(MultiSchedulerDrain, ASchedulerStoppedWithSigtermDrainsAndLosesNothing) {
  write_list(list_path_, {scheds_[0].fe, scheds_[1].fe, scheds_[2].fe});
  for (int f = 0; f < 2; ++f) ASSERT_TRUE(wait_until([&] { return usable(f) == 3.0; }, milliseconds(10000))) << logs();
  ASSERT_FALSE(zmq_endpoints_[1].empty());
  double requeued_before = 0, dead_before = 0;
  for (int f = 0; f < 2; ++f) {
    requeued_before += metric(http_[f], "tessera_frontend_requeued_requests_total");
    dead_before += metric(http_[f], "tessera_frontend_peer_dead_requests_total");
  }
  constexpr int kEach = 24;
  std::vector<Result<http::Response>> over_http;
  std::vector<ZmqAnswer> over_zmq;
  std::thread http_client([&] { over_http = batch(0, kEach); });
  std::thread zmq_client([&] { over_zmq = zmq_batch(zmq_endpoints_[1], kEach, kSystem); });
  std::vector<double> on(3, 0.0);
  const bool loaded = wait_until(
      [&] {
        const auto a = scrape(http_[0]), b = scrape(http_[1]);
        for (size_t s = 0; s < 3; ++s) {
          const std::string label = "scheduler=\"" + scheds_[s].fe + "\"";
          on[s] = sum(a, "tessera_frontend_scheduler_inflight", label) + sum(b, "tessera_frontend_scheduler_inflight", label);
        }
        return sum(a, "tessera_frontend_scheduler_inflight") == kEach && sum(b, "tessera_frontend_scheduler_inflight") == kEach;
      },
      milliseconds(20000), milliseconds(2));
  const size_t victim = static_cast<size_t>(std::max_element(on.begin(), on.end()) - on.begin());
  scheds_[victim].proc->signal(SIGTERM);
  EXPECT_TRUE(loaded) << "the " << 2 * kEach << " requests were not all in flight";
  const std::string line = scheds_[victim].proc->wait_line("DRAINED", milliseconds(60000));
  EXPECT_FALSE(line.empty()) << "the scheduler did not drain\n" << logs();
  EXPECT_EQ(scheds_[victim].proc->wait_exit(milliseconds(10000)), 0);
  http_client.join();
  zmq_client.join();
  const int handed_back = drained_field(line, "handed_back"), refused = drained_field(line, "refused"),
            running = drained_field(line, "running"), left = drained_field(line, "left");
  std::printf("SIGTERM to a scheduler with %g requests: %d handed back, %d refused, %d running finished there, %d left\n",
              on[victim], handed_back, refused, running, left);
  EXPECT_EQ(left, 0) << "the running requests finished within the drain timeout";
  EXPECT_GE(handed_back + refused, 1) << "4 running at most: the others were queued";
  EXPECT_LE(handed_back + refused + running, on[victim]);
  for (const auto& r : over_http) EXPECT_EQ(completion_tokens(r), 120) << (r.ok() ? r->body : r.error().to_string());
  int streamed = 0;
  for (const auto& a : over_zmq) {
    EXPECT_EQ(a.finish, "length");
    EXPECT_EQ(a.final_tokens, 120);
    if (a.stream) {
      ++streamed;
      EXPECT_EQ(a.streamed_tokens, 120) << "a stream carries every token once";
    }
  }
  EXPECT_EQ(streamed, kEach / 2);
  double requeued = 0, dead = 0;
  for (int f = 0; f < 2; ++f) {
    requeued += metric(http_[f], "tessera_frontend_requeued_requests_total");
    dead += metric(http_[f], "tessera_frontend_peer_dead_requests_total");
  }
  EXPECT_EQ(requeued - requeued_before, handed_back + refused) << "each request handed back or refused was submitted again once";
  EXPECT_EQ(dead - dead_before, 0.0) << "nothing was left on the scheduler when its connection closed";
  // Its worker serves on: it registers with another scheduler of its list.
  EXPECT_TRUE(wait_until(
      [&] {
        double live = 0;
        for (size_t s = 0; s < 3; ++s)
          if (s != victim) live += metric(scheds_[s].metrics, "tessera_scheduler_live_workers");
        return live == 3.0;
      },
      scaled(milliseconds(kWorkerDeadMs + 1000)), milliseconds(5)))
      << logs();
  for (int f = 0; f < 2; ++f) EXPECT_TRUE(wait_until([&] { return usable(f) == 2.0; }, milliseconds(3000)));
}

}  // namespace
}  // namespace tessera::testing
