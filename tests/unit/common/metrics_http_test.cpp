// The /metrics server of the scheduler, worker and kvstore (tessera_metrics_http, Boost.Beast):
// what a Prometheus scrape, a health and a readiness check get, on IPv4, IPv6 and the
// dual-stack "::".
#include "tessera/common/metrics_http.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>

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

}  // namespace
}  // namespace tessera::metrics_http
