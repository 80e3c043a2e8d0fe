// Graceful drain and honest states against real processes (docs/operations.md "Drain"):
// SIGTERM to the frontend during 16 streams ends every one with [DONE] (or an error event),
// never a cut; past --drain-timeout-s the streams left end with an error event, new requests
// and /ready get 503 meanwhile; POST /admin/v1/drain does the same as SIGTERM; SIGTERM to the
// worker lets its streams finish (no peer_dead); a worker that cannot register says why;
// `tessera bench` shows progress.
#include <signal.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tessera/testing/cluster.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/paths.h"

namespace tessera::testing {
namespace {

using json = nlohmann::json;

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One streamed completion as a client sees it: every SSE data payload, and the HTTP status.
struct Stream {
  std::atomic<int> events{0};
  std::vector<std::string> data;  // written by the stream's thread; read after join()
  int status = 0;
  std::thread thread;

  void start(int port, int max_tokens, const std::string& prompt) {
    thread = std::thread([this, port, max_tokens, prompt] {
      http::SseParser sse;
      auto r = http::request({.port = port, .method = "POST", .path = "/v1/completions",
                              .body = json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"ignore_eos", true},
                                           {"stream", true}}.dump(),
                              .timeout_ms = 60000,
                              .on_body = [this, &sse](std::string_view bytes) {
                                sse.feed(bytes, [this](const std::string& d) {
                                  data.push_back(d);
                                  ++events;
                                });
                                return true;
                              }});
      status = r.ok() ? r->status : -1;
    });
  }
  // "done": [DONE] after a chunk with a finish_reason; "error": [DONE] after an error event;
  // anything else is a cut stream.
  std::string ending() const {
    if (data.size() < 2 || data.back() != "[DONE]") return "cut after " + std::to_string(data.size()) + " events";
    json last = json::parse(data[data.size() - 2], nullptr, false);
    if (last.is_discarded()) return "bad json";
    if (last.contains("error")) return "error";
    if (last.contains("choices") && !last["choices"][0]["finish_reason"].is_null()) return "done";
    return "no finish_reason";
  }
  std::string error_message() const { return json::parse(data[data.size() - 2])["error"]["message"].get<std::string>(); }
};

TEST(ClusterDrainTest, SigtermToTheFrontendFinishesSixteenStreams) {
  Cluster cluster(ClusterOptions{.num_pages = 1024});
  ASSERT_TRUE(cluster.ok());
  std::vector<Stream> streams(16);
  for (size_t i = 0; i < streams.size(); ++i) streams[i].start(cluster.http_port(), 120, "Story " + std::to_string(i) + ":");
  ASSERT_TRUE(wait_until(
      [&] {
        for (auto& s : streams)
          if (s.events.load() < 2) return false;
        return true;
      },
      milliseconds(30000)))
      << cluster.logs();
  cluster.frontend().signal(SIGTERM);
  for (auto& s : streams) s.thread.join();
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_EQ(streams[i].status, 200) << "stream " << i;
    EXPECT_EQ(streams[i].ending(), "done") << "stream " << i;
  }
  EXPECT_EQ(cluster.frontend().wait_exit(milliseconds(15000)), 0) << cluster.logs();
  EXPECT_NE(read_all(cluster.frontend().log_path()).find("draining"), std::string::npos);
}

// Streams that cannot finish (the worker is frozen): past --drain-timeout-s they end with an
// error event naming the drain; meanwhile /ready and new requests get 503, /health 200.
TEST(ClusterDrainTest, PastTheDrainTimeoutStreamsEndWithAnErrorEvent) {
  Cluster cluster(ClusterOptions{.worker_dead_ms = 60000, .frontend_args = {"--drain-timeout-s", "2"}});
  ASSERT_TRUE(cluster.ok());
  std::vector<Stream> streams(4);
  for (size_t i = 0; i < streams.size(); ++i) streams[i].start(cluster.http_port(), 400, "Tale " + std::to_string(i));
  ASSERT_TRUE(wait_until(
      [&] {
        for (auto& s : streams)
          if (s.events.load() < 2) return false;
        return true;
      },
      milliseconds(30000)));
  cluster.worker().signal(SIGSTOP);
  cluster.frontend().signal(SIGTERM);
  ASSERT_TRUE(wait_until([&] {
    auto r = cluster.get("/ready", 0, 2000);
    return r.ok() && r->status == 503 && r->body.find("\"draining\":true") != std::string::npos;
  }, milliseconds(5000)));
  auto fresh = cluster.post("/v1/completions", R"({"prompt": "Too late", "max_tokens": 4})", 5000);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->status, 503);
  EXPECT_NE(fresh->body.find("draining"), std::string::npos) << fresh->body;
  auto health = cluster.get("/health", 0, 2000);
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200) << "liveness must hold while draining";
  for (auto& s : streams) s.thread.join();
  for (size_t i = 0; i < streams.size(); ++i) {
    ASSERT_EQ(streams[i].ending(), "error") << "stream " << i;
    EXPECT_NE(streams[i].error_message().find("drain timeout (2 s)"), std::string::npos) << streams[i].error_message();
  }
  EXPECT_EQ(cluster.frontend().wait_exit(milliseconds(15000)), 0);
  cluster.worker().signal(SIGCONT);
}

TEST(ClusterDrainTest, AdminDrainStopsTheFrontend) {
  Cluster cluster(ClusterOptions{.frontend_args = {"--admin-token", "t0k"}});
  ASSERT_TRUE(cluster.ok());
  auto h = cluster.get("/health");
  ASSERT_TRUE(h.ok());
  const json health = json::parse(h->body);
  EXPECT_EQ(health["status"], "ok");
  EXPECT_EQ(health["instance"].get<std::string>().size(), 24u) << h->body;  // random: 96 bits in hex
  auto unauth = http::request({.port = cluster.http_port(), .method = "POST", .path = "/admin/v1/drain", .timeout_ms = 5000});
  ASSERT_TRUE(unauth.ok());
  EXPECT_EQ(unauth->status, 401);
  auto d = http::request({.port = cluster.http_port(), .method = "POST", .path = "/admin/v1/drain",
                          .headers = {{"Authorization", "Bearer t0k"}}, .timeout_ms = 5000});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->status, 202) << d->body;
  EXPECT_EQ(cluster.frontend().wait_exit(milliseconds(10000)), 0) << cluster.logs();
}

// SIGTERM to the only worker while it streams: it drains (the scheduler routes nothing new to
// it, plans the rest to the end, then tells it to exit): every stream ends normally.
TEST(ClusterDrainTest, SigtermToTheWorkerLetsItsStreamsFinish) {
  Cluster cluster(ClusterOptions{.num_pages = 1024});
  ASSERT_TRUE(cluster.ok());
  std::vector<Stream> streams(8);
  for (size_t i = 0; i < streams.size(); ++i) streams[i].start(cluster.http_port(), 150, "Once " + std::to_string(i));
  ASSERT_TRUE(wait_until(
      [&] {
        for (auto& s : streams)
          if (s.events.load() < 2) return false;
        return true;
      },
      milliseconds(30000)));
  cluster.worker().signal(SIGTERM);
  for (auto& s : streams) s.thread.join();
  for (size_t i = 0; i < streams.size(); ++i) EXPECT_EQ(streams[i].ending(), "done") << "stream " << i;
  EXPECT_EQ(cluster.worker().wait_exit(milliseconds(10000)), 0) << cluster.logs();
  EXPECT_EQ(cluster.metric(cluster.metrics_port(), "tessera_scheduler_peer_dead_requests_total"), 0.0);
  const std::string slog = read_all(cluster.scheduler().log_path());
  EXPECT_NE(slog.find("worker=w0 | draining"), std::string::npos) << slog;
  EXPECT_NE(slog.find("worker=w0 | drained"), std::string::npos) << slog;
  EXPECT_EQ(cluster.metric(cluster.metrics_port(), "tessera_scheduler_live_workers"), 0.0);
}

// A worker that cannot register logs why: nothing listening at its --scheduler; or connected
// but unanswered because another worker already has its name.
TEST(ClusterDrainTest, AWorkerThatCannotRegisterSaysWhy) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok());
  const std::string dir = make_temp_dir("tessera-register");
  const std::string model = shared_path("models/stories260K/stories260K.bin");
  Process nowhere(bin_path("tessera-worker"),
                  with_keys({"--model", model, "--scheduler", "tcp://127.0.0.1:1", "--threads", "1", "--num-pages", "16",
                             "--name", "lonely", "--scheduler-dead-ms", "500"}),
                  dir + "/nowhere.log");
  Process twin(bin_path("tessera-worker"),
               with_keys({"--model", model, "--scheduler", cluster.scheduler_worker_endpoint(), "--threads", "1",
                          "--num-pages", "16", "--name", "w0", "--scheduler-dead-ms", "500"}),
               dir + "/twin.log");
  EXPECT_TRUE(wait_until([&] { return read_all(dir + "/nowhere.log").find("no connection to tcp://127.0.0.1:1") != std::string::npos; },
                         milliseconds(10000)))
      << read_all(dir + "/nowhere.log");
  EXPECT_TRUE(wait_until([&] { return read_all(dir + "/twin.log").find("another worker may already use the name 'w0'") != std::string::npos; },
                         milliseconds(10000)))
      << read_all(dir + "/twin.log");
  // The cluster's own w0 keeps serving.
  auto r = cluster.post("/v1/completions", R"({"prompt": "Still here", "max_tokens": 4})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200) << r->body;
}

// `tessera bench` reports progress on stderr while it runs (stdout keeps the report).
TEST(ClusterDrainTest, BenchShowsProgress) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok());
  const std::string log = make_temp_dir("tessera-bench") + "/bench.log";
  Process bench(bin_path("tessera"),
                {"bench", "--port", std::to_string(cluster.http_port()), "--num-requests", "32", "--concurrency", "4",
                 "--max-tokens", "64", "--prompt-words", "8", "--progress-s", "0.05"},
                log);
  ASSERT_EQ(bench.wait_exit(milliseconds(60000)), 0) << read_all(log);
  const std::string err = read_all(log);
  EXPECT_NE(err.find("/32 requests done (0 failed) in "), std::string::npos) << err;
  EXPECT_NE(err.find("generated tokens/s"), std::string::npos) << err;
}

}  // namespace
}  // namespace tessera::testing
