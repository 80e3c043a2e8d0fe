// The scheduler's /metrics server (Boost.Beast): what a Prometheus scrape and a health check
// get, on IPv4, IPv6 and the dual-stack "::".
#include "metrics_http.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>  // boost/asio/awaitable.hpp uses std::exchange without including it

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace tessera::scheduler_app {
namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

struct Reply {
  int status = 0;
  std::string content_type;
  std::string body;
};

Reply fetch(const std::string& address, int port, http::verb method, const std::string& target) {
  net::io_context ioc;
  tcp::socket socket(ioc);
  socket.connect(tcp::endpoint(net::ip::make_address(address), static_cast<unsigned short>(port)));
  http::request<http::string_body> req(method, target, 11);
  req.set(http::field::host, "localhost");
  http::write(socket, req);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(socket, buffer, res);
  return Reply{.status = static_cast<int>(res.result_int()),
               .content_type = std::string(res[http::field::content_type]),
               .body = res.body()};
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

  const Reply m = fetch("127.0.0.1", port, http::verb::get, "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(m.body.find("tessera_test_things_total 3"), std::string::npos) << m.body;
  EXPECT_EQ(fetch("127.0.0.1", port, http::verb::get, "/metrics?x=1").status, 200);  // a query is ignored

  const Reply h = fetch("127.0.0.1", port, http::verb::get, "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, "{\"status\":\"ok\"}");

  const Reply nf = fetch("127.0.0.1", port, http::verb::get, "/nope");
  EXPECT_EQ(nf.status, 404);
  EXPECT_NE(nf.body.find("GET /metrics or /health"), std::string::npos);
  EXPECT_EQ(fetch("127.0.0.1", port, http::verb::post, "/metrics").status, 404);
}

TEST_F(MetricsHttp, ListensOnIpv6AndDualStack) {
  auto v6 = MetricsServer::start("::1", 0, registry);
  ASSERT_TRUE(v6.ok()) << v6.error().to_string();
  EXPECT_EQ(fetch("::1", (*v6)->port(), http::verb::get, "/health").status, 200);

  auto any = MetricsServer::start("::", 0, registry);
  ASSERT_TRUE(any.ok()) << any.error().to_string();
  EXPECT_EQ(fetch("::1", (*any)->port(), http::verb::get, "/metrics").status, 200);
  EXPECT_EQ(fetch("127.0.0.1", (*any)->port(), http::verb::get, "/metrics").status, 200);  // IPv4 too
}

TEST_F(MetricsHttp, ABusyPortIsUnavailable) {
  auto first = MetricsServer::start("127.0.0.1", 0, registry);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  auto second = MetricsServer::start("127.0.0.1", (*first)->port(), registry);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace tessera::scheduler_app
