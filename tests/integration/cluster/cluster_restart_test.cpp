// A scheduler that restarts faster than the frontend's --scheduler-dead-ms: the frontend sees its
// connection drop (a socket monitor) or a new `instance` in its heartbeats (docs/protocol.md, "Heartbeats and failure") and ends the old
// instance's in-flight requests with an error at once, instead of leaving the clients hanging
// until the request timeout. New requests are served once the worker has registered again.
#include <signal.h>

#include <atomic>
#include <iostream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/testing/cluster.h"

namespace tessera::testing::cluster_test {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

TEST(ClusterSchedulerRestart, InFlightRequestEndsWithErrorAtOnceAndNewOnesSucceed) {
  // Silence alone would take 20 s to notice: an error well before that comes from the instance rule.
  Cluster cluster(ClusterOptions{.worker_dead_ms = 1000,
                                 .frontend_scheduler_dead_ms = 20000,
                                 .worker_args = {"--scheduler-dead-ms", "600"},
                                 .worker_min_step_ms = kPacedStepMs});  // 480 tokens: >= 4.8 s
  ASSERT_TRUE(cluster.ok());
  std::atomic<int> chunks{0};
  std::atomic<bool> ended{false};
  bool error_event = false;
  bool done = false;
  std::string error_text;
  Clock::time_point end{};
  std::thread client([&] {
    http::SseParser sse;
    const std::string body = json{{"prompt", "Once upon a time"}, {"max_tokens", 480}, {"temperature", 0},
                                  {"stream", true}, {"ignore_eos", true}}.dump();
    auto r = http::request({.port = cluster.http_port(), .method = "POST", .path = "/v1/completions",
                                  .body = body, .timeout_ms = 15000, .on_body = [&](std::string_view b) {
                                    sse.feed(b, [&](const std::string& d) {
                                      if (d == "[DONE]") done = true;
                                      else if (d.find("\"error\"") != std::string::npos) {
                                        error_event = true;
                                        error_text = d;
                                      } else ++chunks;
                                    });
                                    return true;
                                  }});
    end = Clock::now();
    ended = true;
  });
  ASSERT_TRUE(wait_until([&] { return chunks.load() >= 2 || ended.load(); }, milliseconds(15000))) << cluster.logs();
  ASSERT_FALSE(ended.load()) << "the stream finished before the restart; nothing to test";
  cluster.worker().signal(SIGSTOP);  // the request stays in flight across the restart
  const auto killed = Clock::now();
  const bool restarted = cluster.restart_scheduler();
  cluster.worker().signal(SIGCONT);
  client.join();
  ASSERT_TRUE(restarted) << cluster.logs();
  EXPECT_TRUE(error_event) << "the in-flight request did not end with an error event\n" << cluster.logs();
  EXPECT_FALSE(done && !error_event);
  // Noticed by the dropped connection (the kill closes the scheduler's sockets) or, when the
  // new instance answers first, by its new `instance`.
  EXPECT_TRUE(error_text.find("restarted") != std::string::npos || error_text.find("was lost") != std::string::npos)
      << error_text;
  const double took = std::chrono::duration<double>(end - killed).count();
  EXPECT_LT(took, scaled(3.0)) << "the frontend noticed the restart only after " << took << " s\n" << cluster.logs();
  std::cout << "in-flight request ended " << took << " s after the scheduler's kill -9\n";

  // The worker registers with the new scheduler; then a new request succeeds.
  ASSERT_TRUE(wait_until([&] {
    auto r = cluster.get("/ready", 0, 2000);
    return r.ok() && r->status == 200 && cluster.metric(cluster.metrics_port(), "tessera_scheduler_live_workers") == 1.0;
  }, milliseconds(10000))) << "the cluster did not become ready again\n" << cluster.logs();
  auto r = cluster.post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})");
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 8) << r->body;
  EXPECT_GE(cluster.metric(cluster.http_port(), "tessera_frontend_peer_dead_requests_total"), 1.0);
  EXPECT_TRUE(cluster.frontend().alive());
}

}  // namespace
}  // namespace tessera::testing::cluster_test
