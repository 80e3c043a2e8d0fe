#include "tessera/common/metrics_http.h"

#include <chrono>
#include <thread>
#include <utility>  // boost/asio/awaitable.hpp uses std::exchange without including it

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "tessera/common/log.h"

namespace tessera::metrics_http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr auto kReadTimeout = std::chrono::seconds(2);
constexpr auto kWriteTimeout = std::chrono::seconds(5);
constexpr int kMaxConnections = 128;

struct Shared {
  const Endpoints endpoints;
  int open = 0;  // connections being served (the io_context's one thread only)
};

http::response<http::string_body> answer(const http::request<http::string_body>& req, const Shared& shared) {
  http::response<http::string_body> res;
  res.version(req.version());
  res.keep_alive(false);
  const std::string_view target(req.target().data(), req.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  const bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  const Endpoints& e = shared.endpoints;
  if (get && path == "/metrics") {
    res.result(http::status::ok);
    res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    res.body() = e.metrics();
  } else if (get && (path == "/health" || (path == "/ready" && e.ready))) {
    const Answer a = path == "/ready" ? e.ready() : e.health ? e.health() : Answer{};
    res.result(static_cast<http::status>(a.status));
    res.set(http::field::content_type, "application/json");
    res.body() = a.body;
  } else {
    res.result(http::status::not_found);
    res.set(http::field::content_type, "application/json");
    res.body() = e.ready ? "{\"error\":\"not found: GET /metrics, /health or /ready\"}"
                         : "{\"error\":\"not found: GET /metrics or /health\"}";
  }
  res.prepare_payload();
  return res;
}

net::awaitable<void> session(tcp::socket socket, Shared& shared) {
  struct Count {  // the connection counts as open until this coroutine ends, however it ends
    Shared& s;
    explicit Count(Shared& sh) : s(sh) { ++s.open; }
    ~Count() { --s.open; }
  } count(shared);
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  http::request_parser<http::string_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(16 * 1024);
  boost::system::error_code ec;
  // The whole request (however slowly it trickles) within kReadTimeout: Beast's expiry is a
  // deadline for every read of the composed operation, not a per-read idle timer.
  stream.expires_after(kReadTimeout);
  co_await http::async_read(stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;  // timeout, reset or not HTTP: a scrape endpoint owes no answer
  const auto& req = parser.get();
  auto res = answer(req, shared);
  stream.expires_after(kWriteTimeout);
  if (req.method() == http::verb::head) {
    http::response<http::empty_body> header_only{std::move(res.base())};
    co_await http::async_write(stream, header_only, net::redirect_error(net::use_awaitable, ec));
  } else {
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
  }
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
}

net::awaitable<void> accept_loop(tcp::acceptor& acceptor, Shared& shared) {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
      TS_LOG(kWarn) << "metrics accept: " << ec.message();
      continue;
    }
    if (shared.open >= kMaxConnections) {  // (not logged: that would be a log flood)
      socket.close(ec);
      continue;
    }
    net::co_spawn(acceptor.get_executor(), session(std::move(socket), shared), net::detached);
  }
}

Result<tcp::endpoint> endpoint_for(net::io_context& ioc, const std::string& host, int port) {
  boost::system::error_code ec;
  const net::ip::address addr = net::ip::make_address(host, ec);
  if (!ec) return tcp::endpoint(addr, static_cast<unsigned short>(port));
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::numeric_service, ec);
  if (ec || results.empty())
    return make_error(ErrorCode::kInvalidArgument,
                      "metrics-host '" + host + "' is not an IPv4/IPv6 address and does not resolve" +
                          (ec ? ": " + ec.message() : std::string()));
  return results.begin()->endpoint();
}

}  // namespace

Answer loop_health(const std::atomic<int64_t>& heartbeat, int64_t stall_ms) {
  const int64_t last = heartbeat.load(std::memory_order_relaxed);
  const int64_t now =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  const int64_t age = now - last;
  const bool ok = age <= stall_ms;
  return {.status = ok ? 200 : 503,
          .body = std::string("{\"status\":\"") + (ok ? "ok" : "stalled") + "\",\"event_loop_ms_since_iteration\":" +
                  std::to_string(age) + ",\"stall_ms\":" + std::to_string(stall_ms) + "}"};
}

struct MetricsServer::State {
  explicit State(Endpoints e) : shared{std::move(e)} {}
  Shared shared;
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  std::thread thread;
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& host, int port,
                                                            const metrics::Registry& registry) {
  return start(host, port, Endpoints{.metrics = [&registry] { return registry.render(); }});
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& host, int port, Endpoints endpoints) {
  auto state = std::make_unique<State>(std::move(endpoints));
  TS_ASSIGN_OR_RETURN(tcp::endpoint ep, endpoint_for(state->ioc, host, port));
  boost::system::error_code ec;
  tcp::acceptor& a = state->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec && ep.protocol() == tcp::v6()) a.set_option(net::ip::v6_only(false), ec);  // "::" serves IPv4 too
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return make_error(ErrorCode::kUnavailable, "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  net::co_spawn(state->ioc, accept_loop(state->acceptor, state->shared), net::detached);
  State* s = state.get();
  s->thread = std::thread([s] { s->ioc.run(); });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(state)));
}

MetricsServer::MetricsServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

MetricsServer::~MetricsServer() {
  state_->ioc.stop();
  state_->thread.join();
}

int MetricsServer::port() const {
  boost::system::error_code ec;
  return state_->acceptor.local_endpoint(ec).port();
}

}  // namespace tessera::metrics_http
