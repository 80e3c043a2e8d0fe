// Private: one HTTP request on one connection of the frontend's server (http_server.cpp), and
// the writers every route uses. A Conn lives on its connection's strand for one request: it
// borrows the server's Deps (which outlive every connection) and the connection's stream.
// Routes: generate() and admin() in http_server.cpp, dashboard() in http_dashboard.cpp.
#pragma once

#include <utility>  // boost/asio/awaitable.hpp uses std::exchange without including it

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "access_log.h"
#include "http_server.h"
#include "tessera/frontend/generation.h"

namespace tessera::frontend {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using Request = http::request<http::string_body>;

struct HttpServer::Conn {
  const Deps& s;
  beast::tcp_stream& stream;
  unsigned version;
  bool keep_alive;
  std::string route;
  std::string request_id;  // x-request-id: the client's, else generated; echoed on every answer
  Principal principal{};   // who sent it (api_keys.h); the open principal without keys
  AccessRecord access{};   // filled as the request goes; written by log_access when it ends
  bool head = false;       // HEAD: answered like GET, without the body
  // Writes: each runs under a deadline, http_write_timeout_ms from its start or write_cap (the
  // request's deadline while a generation runs) when sooner. Beast closes the socket when it
  // passes: the write fails and write_timed_out tells it from a disconnect.
  Clock::time_point write_cap = Clock::time_point::max();
  bool write_timed_out = false;

  void arm_write() {
    stream.expires_at(std::min(Clock::now() + std::chrono::milliseconds(s.config.http_write_timeout_ms), write_cap));
  }
  bool wrote(const boost::system::error_code& ec) {
    stream.expires_never();
    if (ec == beast::error::timeout) write_timed_out = true;
    return !ec;
  }

  net::awaitable<bool> respond(int status, std::string_view content_type, std::string body) {
    http::response<http::string_body> res{static_cast<http::status>(status), version};
    res.set(http::field::server, "tessera");
    if (!request_id.empty()) res.set("x-request-id", request_id);
    if (status == 429) res.set(http::field::retry_after, "1");
    res.set(http::field::content_type, std::string(content_type));
    res.keep_alive(keep_alive);
    res.body() = std::move(body);
    res.prepare_payload();
    s.metrics.count_response(route, status);
    access.status = status;
    boost::system::error_code ec;
    arm_write();
    if (head) {
      http::response<http::empty_body> header_only{std::move(res.base())};  // Content-Length of the GET body, no body
      co_await http::async_write(stream, header_only, net::redirect_error(net::use_awaitable, ec));
    } else {
      co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    }
    co_return wrote(ec) && keep_alive;
  }

  net::awaitable<bool> error(const Error& e, std::string_view param = "") {
    co_return co_await respond(http_status(e.code), "application/json", error_json(e, param));
  }

  net::awaitable<bool> refuse(const AuthFailure& f) {
    co_return co_await respond(f.http_status, "application/json",
                               error_json(make_error(ErrorCode::kPermissionDenied, f.message), "", f.code, f.http_status));
  }

  net::awaitable<bool> write_chunk(const std::string& data) {
    boost::system::error_code ec;
    arm_write();
    co_await net::async_write(stream, http::make_chunk(net::buffer(data)), net::redirect_error(net::use_awaitable, ec));
    co_return wrote(ec);
  }

  net::awaitable<bool> start_events() {
    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::server, "tessera");
    res.set(http::field::content_type, "text/event-stream");
    if (!request_id.empty()) res.set("x-request-id", request_id);
    res.set(http::field::cache_control, "no-cache");
    res.keep_alive(keep_alive);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    s.metrics.count_response(route, 200);
    access.status = 200;
    boost::system::error_code ec;
    arm_write();
    co_await http::async_write_header(stream, sr, net::redirect_error(net::use_awaitable, ec));
    co_return wrote(ec);
  }

  net::awaitable<bool> end_events(const std::string& last) {
    if (!co_await write_chunk(last + "data: [DONE]\n\n")) co_return false;
    boost::system::error_code ec;
    arm_write();
    co_await net::async_write(stream, http::make_chunk_last(), net::redirect_error(net::use_awaitable, ec));
    co_return wrote(ec) && keep_alive;
  }

  net::awaitable<bool> generate(const Request& req, protocol::RequestKind kind);
  // Sets the access record's token fields and observes the request's histograms.
  void end_generation(const RequestClock& clock, std::string reason, int32_t prompt, int32_t cached, int32_t completion,
                      double queue_ms = -1) {
    access.finish_reason = reason;
    access.prompt_tokens = prompt;
    access.cached_tokens = cached;
    access.completion_tokens = completion;
    access.ttft_ms = clock.ttft_ms();
    s.metrics.done(clock, {.finish_reason = std::move(reason), .prompt_tokens = prompt, .completion_tokens = completion,
                           .queue_ms = queue_ms});
  }
  net::awaitable<bool> admin(const Request& req, const std::string& path);
  // GET /dashboard, /dashboard/snapshot, /dashboard/events (dashboard.h): no key, no admission slot.
  net::awaitable<bool> dashboard(const std::string& path);
  // Waits (on this strand, never blocking the thread) for the stored preference of r.user.
  net::awaitable<std::optional<StoredPreference>> stored_preference(const protocol::GenerateRequest& r, Clock::time_point deadline);
};

}  // namespace tessera::frontend
