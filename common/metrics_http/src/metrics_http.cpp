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

constexpr auto kReadTimeout = std::chrono::seconds(5);

http::response<http::string_body> answer(const http::request<http::string_body>& req, const Endpoints& endpoints) {
  http::response<http::string_body> res;
  res.version(req.version());
  res.keep_alive(false);
  const std::string_view target(req.target().data(), req.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (req.method() == http::verb::get && path == "/metrics") {
    res.result(http::status::ok);
    res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    res.body() = endpoints.metrics();
  } else if (req.method() == http::verb::get && (path == "/health" || (path == "/ready" && endpoints.ready))) {
    const Answer a = path == "/ready" ? endpoints.ready() : endpoints.health ? endpoints.health() : Answer{};
    res.result(static_cast<http::status>(a.status));
    res.set(http::field::content_type, "application/json");
    res.body() = a.body;
  } else {
    res.result(http::status::not_found);
    res.set(http::field::content_type, "application/json");
    res.body() = endpoints.ready ? "{\"error\":\"not found: GET /metrics, /health or /ready\"}"
                                 : "{\"error\":\"not found: GET /metrics or /health\"}";
  }
  res.prepare_payload();
  return res;
}

net::awaitable<void> session(tcp::socket socket, const Endpoints& endpoints) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  http::request<http::string_body> req;
  boost::system::error_code ec;
  stream.expires_after(kReadTimeout);
  co_await http::async_read(stream, buffer, req, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;  // timeout, reset or not HTTP: a scrape endpoint owes no answer
  auto res = answer(req, endpoints);
  co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
}

net::awaitable<void> accept_loop(tcp::acceptor& acceptor, const Endpoints& endpoints) {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
      TS_LOG(kWarn) << "metrics accept: " << ec.message();
      continue;
    }
    net::co_spawn(acceptor.get_executor(), session(std::move(socket), endpoints), net::detached);
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

struct MetricsServer::State {
  explicit State(Endpoints e) : endpoints(std::move(e)) {}
  const Endpoints endpoints;
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
  net::co_spawn(state->ioc, accept_loop(state->acceptor, state->endpoints), net::detached);
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
