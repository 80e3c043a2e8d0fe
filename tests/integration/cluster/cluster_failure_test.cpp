// End-to-end failure handling: a client that disconnects mid-stream gets its pages freed; bad
// input anywhere gets a clear error while every process stays up; kill -9 of the worker ends its
// in-flight requests with an error within seconds and turns /ready false.
#include <signal.h>

#include <atomic>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/curve_keys.h"

namespace tessera::testing::cluster_test {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string long_request(const std::string& prompt, int max_tokens) {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", true}, {"ignore_eos", true}}.dump();
}

class ClusterFailureTest : public SharedClusterTest {
 protected:
  double held_pages() const { return cluster_->metric(cluster_->metrics_port(), "tessera_scheduler_pages", "state=\"held\""); }
  // The same figures as the frontend shows them (from the scheduler's heartbeats).
  double frontend_pages(const std::string& state) const {
    return cluster_->metric(cluster_->http_port(), "tessera_frontend_scheduler_pages", "state=\"" + state + "\"");
  }
  double scheduler_pages(const std::string& state) const {
    return cluster_->metric(cluster_->metrics_port(), "tessera_scheduler_pages", "state=\"" + state + "\"");
  }
  // True when the frontend's page gauges equal the scheduler's, state by state.
  bool frontend_matches_scheduler() const {
    for (const char* st : {"free", "held", "cached"})
      if (!(frontend_pages(st) == scheduler_pages(st))) return false;  // NaN (absent) never matches
    return true;
  }
};

TEST_F(ClusterFailureTest, ClientDisconnectFreesItsPages) {
  ASSERT_TRUE(wait_until([&] { return held_pages() == 0.0; }, milliseconds(5000))) << "held pages never reached 0";
  // Baseline on the frontend's /metrics: the scheduler's page figures arrive with its heartbeats.
  ASSERT_TRUE(wait_until([&] { return frontend_pages("held") == 0.0 && frontend_matches_scheduler(); }, milliseconds(5000)))
      << "frontend pages free/held/cached = " << frontend_pages("free") << "/" << frontend_pages("held") << "/"
      << frontend_pages("cached") << ", scheduler's " << scheduler_pages("free") << "/" << held_pages() << "/"
      << scheduler_pages("cached");
  const double total = frontend_pages("free") + frontend_pages("held") + frontend_pages("cached");
  EXPECT_EQ(total, 512.0) << "free + held + cached must be the worker's pool (ClusterOptions::num_pages)";
  const double cancelled_before =
      cluster_->metric(cluster_->metrics_port(), "tessera_scheduler_requests_total", "reason=\"cancelled\"");
  std::atomic<int> events{0};
  auto r = http::request({.port = cluster_->http_port(), .method = "POST", .path = "/v1/completions",
                                .body = long_request("Once upon a time", 480), .timeout_ms = 20000,
                                .on_body = [&](std::string_view) { return ++events < 2; }});  // leave after 2 chunks
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->status, 200);
  // The frontend notices the closed socket, cancels at the scheduler, which frees every page.
  EXPECT_TRUE(wait_until(
      [&] {
        double c = cluster_->metric(cluster_->metrics_port(), "tessera_scheduler_requests_total", "reason=\"cancelled\"");
        return c == c && c >= (cancelled_before == cancelled_before ? cancelled_before : 0.0) + 1.0;
      },
      milliseconds(5000)))
      << "the scheduler never saw the cancel\n" << cluster_->logs();
  EXPECT_TRUE(wait_until([&] { return held_pages() == 0.0; }, milliseconds(5000)))
      << "held pages stayed at " << held_pages() << "\n" << cluster_->logs();
  // ... and the frontend's view returns to the same baseline (held 0, the rest as the scheduler says).
  EXPECT_TRUE(wait_until([&] { return frontend_pages("held") == 0.0 && frontend_matches_scheduler(); }, milliseconds(5000)))
      << "frontend held pages stayed at " << frontend_pages("held") << "\n" << cluster_->logs();
  EXPECT_EQ(frontend_pages("free") + frontend_pages("held") + frontend_pages("cached"), total);
  EXPECT_GE(cluster_->metric(cluster_->http_port(), "tessera_frontend_client_disconnects_total"), 1.0);
}

struct Expect {
  std::string what, body, path;
  int status;
};

TEST_F(ClusterFailureTest, BadInputGetsClearErrorsAndEveryProcessStaysUp) {
  std::string huge;
  for (int i = 0; i < 600; ++i) huge += "story ";
  const std::vector<Expect> cases = {
      {"malformed JSON", "{\"prompt\": \"hi\", ", "/v1/completions", 400},
      {"not an object", "[1, 2, 3]", "/v1/completions", 400},
      {"wrong type of prompt", R"({"prompt": 42, "max_tokens": 4})", "/v1/completions", 400},
      {"wrong type of max_tokens", R"({"prompt": "hi", "max_tokens": "ten"})", "/v1/completions", 400},
      {"wrong type of messages", R"({"messages": "hello"})", "/v1/chat/completions", 400},
      {"negative max_tokens", R"({"prompt": "hi", "max_tokens": -3})", "/v1/completions", 400},
      {"max_tokens 0", R"({"prompt": "hi", "max_tokens": 0})", "/v1/completions", 400},
      {"unknown model", R"({"model": "no-such-model", "prompt": "hi", "max_tokens": 4})", "/v1/completions", 404},
      {"oversized prompt", json{{"prompt", huge}, {"max_tokens", 4}}.dump(), "/v1/completions", 400},  // context_length_exceeded
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto r = cluster_->post(c.path, c.body);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_EQ(r->status, c.status) << r->body;
    json j = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body;
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_FALSE(j["error"].value("message", "").empty()) << r->body;
  }

  // Garbage bytes on the frontend's ZeroMQ API, the scheduler's frontend socket and its worker
  // socket: error replies where a reply is possible, and nobody falls over.
  zmq::context_t ctx(1);
  auto garbage_to = [&](const std::string& endpoint, bool expect_reply, const curve::ClientKeys& keys) {
    SCOPED_TRACE(endpoint);
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    curve::make_client(s, keys);
    s.connect(endpoint);
    ASSERT_TRUE(zmqu::send(s, {std::string("\xc1\xff\x00garbage\x93", 12)}).ok());
    ASSERT_TRUE(zmqu::send(s, {std::string("\x81\xa1v\x01", 4)}).ok());  // a map without type/id
    if (!expect_reply) return;
    for (int i = 0; i < 2; ++i) {
      zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(5000));
      ASSERT_TRUE(item.revents & ZMQ_POLLIN) << "no error reply to garbage";
      auto frames = zmqu::recv(s);
      ASSERT_TRUE(frames.ok() && !frames->empty());
      auto msg = protocol::decode(frames->back());
      ASSERT_TRUE(msg.ok()) << msg.error().to_string();
      auto* err = std::get_if<protocol::ErrorEvent>(&*msg);
      ASSERT_NE(err, nullptr) << "reply was '" << protocol::message_type(*msg) << "'";
      EXPECT_FALSE(err->message.empty());
      EXPECT_TRUE(err->code == ErrorCode::kMalformedMessage || err->code == ErrorCode::kInvalidArgument ||
                  err->code == ErrorCode::kProtocolMismatch)
          << error_code_name(err->code) << ": " << err->message;
    }
  };
  garbage_to(cluster_->zmq_endpoint(), true, {});
  garbage_to(cluster_->scheduler_frontend_endpoint(), true, client_keys(curve::Role::kFrontend, curve::Role::kScheduler));
  garbage_to(cluster_->scheduler_worker_endpoint(), false, client_keys(curve::Role::kWorker, curve::Role::kScheduler));

  // A prompt token id outside the vocabulary sent straight to the scheduler: a clear error.
  {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    secure_client(s, curve::Role::kFrontend, curve::Role::kScheduler);
    s.connect(cluster_->scheduler_frontend_endpoint());
    protocol::GenerateRequest req;
    req.id = 5;
    req.prompt_tokens = {1, 99999};
    req.max_tokens = 2;
    ASSERT_TRUE(zmqu::send(s, {protocol::encode(req)}).ok());
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(5000));
    ASSERT_TRUE(item.revents & ZMQ_POLLIN);
    auto msg = protocol::decode(zmqu::recv(s)->back());
    ASSERT_TRUE(msg.ok());
    auto* err = std::get_if<protocol::ErrorEvent>(&*msg);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(err->code, ErrorCode::kInvalidArgument);
    EXPECT_NE(err->message.find("vocabulary"), std::string::npos) << err->message;
  }

  EXPECT_TRUE(cluster_->scheduler().alive());
  EXPECT_TRUE(cluster_->worker().alive());
  EXPECT_TRUE(cluster_->frontend().alive());
  auto ok = cluster_->post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto ready = cluster_->get("/ready");
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(ready->status, 200);
}

// Own cluster: the worker dies for good.
TEST(ClusterWorkerDeath, KillNineFailsInFlightRequestsAndReadyTurnsFalse) {
  // Paced (kPacedStepMs): the 480-token streams last >= 4.8 s, so they are in flight at the kill.
  Cluster cluster(ClusterOptions{.worker_dead_ms = 1000, .worker_min_step_ms = kPacedStepMs});
  ASSERT_TRUE(cluster.ok());
  constexpr int kStreams = 6;
  struct Outcome {
    std::atomic<int> chunks{0};
    std::atomic<bool> ended{false};
    bool error_event = false;
    bool done = false;
    Clock::time_point end{};
  };
  std::vector<Outcome> out(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      http::SseParser sse;
      auto r = http::request({.port = cluster.http_port(), .method = "POST", .path = "/v1/completions",
                                    .body = long_request("Once upon a time, story " + std::to_string(i), 480),
                                    .timeout_ms = 30000, .on_body = [&](std::string_view b) {
                                      sse.feed(b, [&](const std::string& d) {
                                        if (d == "[DONE]") out[i].done = true;
                                        else if (d.find("\"error\"") != std::string::npos) out[i].error_event = true;
                                        else ++out[i].chunks;
                                      });
                                      return true;
                                    }});
      out[i].end = Clock::now();
      out[i].ended = true;
    });
  }
  // Freeze the worker once every stream has produced tokens, so requests are surely in flight,
  // then kill it.
  ASSERT_TRUE(wait_until([&] {
    for (auto& o : out)
      if (o.chunks.load() < 1 && !o.ended.load()) return false;
    return true;
  }, milliseconds(15000)));
  cluster.worker().signal(SIGSTOP);
  std::vector<int> in_flight;
  for (int i = 0; i < kStreams; ++i)
    if (!out[i].ended.load()) in_flight.push_back(i);
  cluster.worker().signal(SIGKILL);
  const auto killed = Clock::now();
  for (auto& t : threads) t.join();
  ASSERT_FALSE(in_flight.empty()) << "every stream finished before the worker was frozen; nothing to test";
  for (int i : in_flight) {
    SCOPED_TRACE("stream " + std::to_string(i));
    EXPECT_TRUE(out[i].error_event) << "an in-flight request did not end with an error event";
    EXPECT_FALSE(out[i].done && !out[i].error_event);
    EXPECT_LT(std::chrono::duration<double>(out[i].end - killed).count(), scaled(5.0));
  }
  EXPECT_TRUE(wait_until([&] {
    auto r = cluster.get("/ready", 0, 2000);
    return r.ok() && r->status == 503;
  }, milliseconds(5000))) << cluster.logs();
  // New work is refused at once, not queued forever.
  const auto t0 = Clock::now();
  auto r = cluster.post("/v1/completions", R"({"prompt": "hi", "max_tokens": 4})", 10000);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  EXPECT_TRUE(cluster.scheduler().alive());
  EXPECT_TRUE(cluster.frontend().alive());
}

// Two workers: requests spread over both (bounded-load routing); when one dies, new work goes to
// the other and /ready stays true.
TEST(ClusterTwoWorkers, RequestsSpreadAndSurviveOneWorkerDeath) {
  Cluster cluster(ClusterOptions{.worker_dead_ms = 1000, .num_workers = 2});
  ASSERT_TRUE(cluster.ok());
  constexpr int kStreams = 8;
  std::vector<int> status(kStreams, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i)
    threads.emplace_back([&, i] {
      auto r = cluster.post("/v1/completions", json{{"prompt", "Story number " + std::to_string(i) + " begins"},
                                                    {"max_tokens", 64}, {"temperature", 0}, {"ignore_eos", true}}
                                                   .dump());
      status[i] = r.ok() ? r->status : -1;
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) EXPECT_EQ(status[i], 200) << "request " << i;
  // Both workers got requests (bounded-load routing spreads 8 concurrent requests over 2).
  for (const char* w : {"worker=\"w0\"", "worker=\"w1\""})
    EXPECT_GE(cluster.metric(cluster.metrics_port(), "tessera_scheduler_routed_requests_total", w), 1.0) << w << " got no work";
  cluster.worker(1).signal(SIGKILL);
  EXPECT_TRUE(wait_until([&] { return cluster.metric(cluster.metrics_port(), "tessera_scheduler_live_workers") == 1.0; },
                         milliseconds(5000)));
  for (int i = 0; i < 4; ++i) {
    auto r = cluster.post("/v1/completions", R"({"prompt": "After the failure", "max_tokens": 16})");
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_EQ(r->status, 200) << r->body;
  }
  auto ready = cluster.get("/ready");
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(ready->status, 200);
}

}  // namespace
}  // namespace tessera::testing::cluster_test
