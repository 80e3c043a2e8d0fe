// The /metrics server of the scheduler, worker and kvstore (tessera_metrics_http, Boost.Beast):
// what a Prometheus scrape, a health and a readiness check get, on IPv4, IPv6 and the
// dual-stack "::".
#include "tessera/common/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tessera/http/client.h"

namespace tessera::metrics_http {
namespace {

struct Reply {
  int status = 0;  // 0: no answer
  std::string content_type;
  std::string body;
};

// Through the one HTTP client (tessera/http/client.h).
Reply fetch(const std::string& address, int port, const std::string& method, const std::string& target) {
  auto r = http::request({.host = address, .port = port, .method = method, .path = target, .timeout_ms = 10000});
  if (!r.ok()) {
    ADD_FAILURE() << r.error().to_string();
    return {};
  }
  return Reply{.status = r->status, .content_type = r->content_type, .body = r->body};
}

class MetricsHttp : public ::testing::Test {
 protected:
  MetricsHttp() { registry.counter("tessera_test_things_total", "things counted by the test").inc(3); }
  metrics::Registry registry;
};

TEST_F(MetricsHttp, ServesMetricsHealthAndNotFound) {
  auto server = MetricsServer::start("127.0.0.1", 0, registry);
  ASSERT_TRUE(server.ok()) << server.error().to_string();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);

  const Reply m = fetch("127.0.0.1", port, "GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(m.body.find("tessera_test_things_total 3"), std::string::npos) << m.body;
  EXPECT_EQ(fetch("127.0.0.1", port, "GET", "/metrics?x=1").status, 200);  // a query is ignored

  const Reply h = fetch("127.0.0.1", port, "GET", "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, "{\"status\":\"ok\"}");

  const Reply nf = fetch("127.0.0.1", port, "GET", "/nope");
  EXPECT_EQ(nf.status, 404);
  EXPECT_NE(nf.body.find("GET /metrics or /health"), std::string::npos);
  EXPECT_EQ(fetch("127.0.0.1", port, "POST", "/metrics").status, 404);
}

TEST_F(MetricsHttp, ListensOnIpv6AndDualStack) {
  auto v6 = MetricsServer::start("::1", 0, registry);
  ASSERT_TRUE(v6.ok()) << v6.error().to_string();
  EXPECT_EQ(fetch("::1", (*v6)->port(), "GET", "/health").status, 200);

  auto any = MetricsServer::start("::", 0, registry);
  ASSERT_TRUE(any.ok()) << any.error().to_string();
  EXPECT_EQ(fetch("::1", (*any)->port(), "GET", "/metrics").status, 200);
  EXPECT_EQ(fetch("127.0.0.1", (*any)->port(), "GET", "/metrics").status, 200);  // IPv4 too
}

// The worker's and kvstore's use: metrics rendered per scrape, their own /health and /ready.
TEST_F(MetricsHttp, ServesCallbacksForMetricsHealthAndReady) {
  std::atomic<int> scrapes{0};
  std::atomic<bool> ready{false};
  auto server = MetricsServer::start(
      "127.0.0.1", 0,
      Endpoints{.metrics = [&] { return "tessera_test_scrapes " + std::to_string(++scrapes) + "\n"; },
                .health = [] { return Answer{.status = 200, .body = "{\"status\":\"ok\",\"instance\":\"x1\"}"}; },
                .ready = [&] { return ready ? Answer{} : Answer{.status = 503, .body = "{\"ready\":false}"}; }});
  ASSERT_TRUE(server.ok()) << server.error().to_string();
  const int port = (*server)->port();
  EXPECT_EQ(fetch("127.0.0.1", port, "GET", "/metrics").body, "tessera_test_scrapes 1\n");
  EXPECT_EQ(fetch("127.0.0.1", port, "GET", "/metrics").body, "tessera_test_scrapes 2\n");
  EXPECT_EQ(fetch("127.0.0.1", port, "GET", "/health").body, "{\"status\":\"ok\",\"instance\":\"x1\"}");
  const Reply not_ready = fetch("127.0.0.1", port, "GET", "/ready");
  EXPECT_EQ(not_ready.status, 503);
  EXPECT_EQ(not_ready.body, "{\"ready\":false}");
  ready = true;
  EXPECT_EQ(fetch("127.0.0.1", port, "GET", "/ready").status, 200);
  const Reply nf = fetch("127.0.0.1", port, "GET", "/nope");
  EXPECT_EQ(nf.status, 404);
  EXPECT_NE(nf.body.find("/ready"), std::string::npos) << nf.body;
}

TEST_F(MetricsHttp, ABusyPortIsUnavailable) {
  auto first = MetricsServer::start("127.0.0.1", 0, registry);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  auto second = MetricsServer::start("127.0.0.1", (*first)->port(), registry);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
}

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// /health follows the event loop (issue 18, finding 8): 200 while its latest iteration is within
// stall_ms, 503 "stalled" once it is older.
TEST_F(MetricsHttp, HealthIs503WhenTheEventLoopHasNotIteratedWithinTheBound) {
  std::atomic<int64_t> beat{steady_ms()};
  auto server = MetricsServer::start(
      "127.0.0.1", 0,
      Endpoints{.metrics = [this] { return registry.render(); }, .health = [&beat] { return loop_health(beat, 1000); }});
  ASSERT_TRUE(server.ok()) << server.error().to_string();
  const int port = (*server)->port();
  const Reply ok = fetch("127.0.0.1", port, "GET", "/health");
  EXPECT_EQ(ok.status, 200);
  EXPECT_NE(ok.body.find("\"status\":\"ok\""), std::string::npos) << ok.body;
  EXPECT_NE(ok.body.find("\"stall_ms\":1000"), std::string::npos) << ok.body;
  beat.store(steady_ms() - 1500);  // the loop's latest iteration 1.5 s ago
  const Reply stalled = fetch("127.0.0.1", port, "GET", "/health");
  EXPECT_EQ(stalled.status, 503);
  EXPECT_NE(stalled.body.find("\"status\":\"stalled\""), std::string::npos) << stalled.body;
  EXPECT_EQ(fetch("127.0.0.1", port, "GET", "/metrics").status, 200);  // metrics still render
  beat.store(steady_ms());
  EXPECT_EQ(fetch("127.0.0.1", port, "GET", "/health").status, 200);
  // HEAD: the status and Content-Length of GET, no body.
  auto head = http::request({.host = "127.0.0.1", .port = port, .method = "HEAD", .path = "/health", .timeout_ms = 10000});
  ASSERT_TRUE(head.ok()) << head.error().to_string();
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
}

// Clients trickling one byte every 0.5 s hold their connections, yet scrapes and health checks
// keep being answered within a deadline, and the slow connections are closed after the read
// timeout.
TEST_F(MetricsHttp, SlowClientsDoNotBlockScrapes) {
  auto server = MetricsServer::start("127.0.0.1", 0, registry);
  ASSERT_TRUE(server.ok()) << server.error().to_string();
  const int port = (*server)->port();
  std::vector<int> slow;
  for (int i = 0; i < 8; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    slow.push_back(fd);
  }
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    const std::string req = "GET /metrics HTTP/1.1\r\nHost: t\r\nX-Pad: aaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    for (size_t i = 0; i < req.size() && !done.load(); ++i) {
      for (int fd : slow) (void)::send(fd, req.data() + i, 1, MSG_NOSIGNAL);
      (void)::poll(nullptr, 0, 500);  // paces the clients: one byte per 0.5 s (not tied to any socket's state)
    }
  });
  // A scrape blocked behind the slow connections would wait for their 2 s read timeout (counted
  // from their connect, just above): 1.5 s tells the two apart with room for a loaded machine or
  // ASan (the client's own timeout is longer, so a slow answer fails the bound, not the request).
  constexpr double kBoundMs = 1500;
  for (int i = 0; i < 4; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto m = http::request({.host = "127.0.0.1", .port = port, .path = "/metrics", .timeout_ms = 10000});
    auto h = http::request({.host = "127.0.0.1", .port = port, .path = "/health", .timeout_ms = 10000});
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    ASSERT_TRUE(h.ok()) << h.error().to_string();
    EXPECT_EQ(m->status, 200);
    EXPECT_EQ(h->status, 200);
    EXPECT_LT(ms, kBoundMs) << "scrape " << i;
  }
  // The slow connections are closed (no answer owed) once the read timeout (2 s) passes.
  for (int fd : slow) {
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 6000), 1);
    char c;
    EXPECT_LE(::recv(fd, &c, 1, MSG_DONTWAIT), 0);
  }
  done.store(true);
  trickle.join();
  for (int fd : slow) ::close(fd);
}

}  // namespace
}  // namespace tessera::metrics_http
