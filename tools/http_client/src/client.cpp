#include "tessera/http/client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <limits>
#include <optional>

namespace tessera::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

Error transport_error(const beast::error_code& ec, const std::string& what) {
  if (ec == beast::error::timeout) return make_error(ErrorCode::kDeadlineExceeded, "HTTP " + what + " timed out");
  if (ec.category() == bhttp::make_error_code(bhttp::error::end_of_stream).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message)
    return make_error(ErrorCode::kMalformedMessage, "not an HTTP response (" + ec.message() + ")");
  return make_error(ErrorCode::kUnavailable, what + ": " + ec.message());
}

}  // namespace

// The connection, its Asio context and what it is connected to. Every operation is started
// asynchronously with the request's deadline on the stream and run to completion on io, so a
// server that hangs fails the request at the deadline instead of hanging the caller.
struct Client::Impl {
  asio::io_context io;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  std::string host;
  int port = 0;

  bool connected_to(const Request& r) const { return stream && stream->socket().is_open() && host == r.host && port == r.port; }

  void close() {
    if (stream) {
      beast::error_code ignored;
      stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream->socket().close(ignored);
    }
    stream.reset();
    buffer.clear();
  }

  // Runs the operation started by `start(handler)` until it completes; its error.
  template <class Start>
  beast::error_code run(Start&& start) {
    beast::error_code result;
    bool done = false;
    start([&](beast::error_code ec, auto&&...) {
      result = ec;
      done = true;
    });
    io.restart();
    while (!done && io.run_one() > 0) {
    }
    return done ? result : beast::error_code(asio::error::operation_aborted);
  }

  Status connect(const Request& r, Clock::time_point deadline) {
    close();
    tcp::resolver resolver(io);
    beast::error_code ec;
    const auto endpoints = resolver.resolve(r.host, std::to_string(r.port), ec);
    if (ec) return make_error(ErrorCode::kUnavailable, "cannot resolve host '" + r.host + "': " + ec.message());
    stream.emplace(io);
    stream->expires_at(deadline);
    ec = run([&](auto handler) { stream->async_connect(endpoints, handler); });
    if (ec) {
      close();
      if (ec == beast::error::timeout) return make_error(ErrorCode::kDeadlineExceeded, "HTTP connect timed out");
      return make_error(ErrorCode::kUnavailable, "connect " + r.host + ":" + std::to_string(r.port) + ": " + ec.message());
    }
    stream->socket().set_option(tcp::no_delay(true), ec);
    host = r.host;
    port = r.port;
    return ok_status();
  }

  // One exchange on the open connection. `*nothing_received` is set when nothing of a response
  // arrived (the server had closed a kept-alive connection): the caller may retry.
  Result<Response> exchange(const Request& r, bool keep_alive, Clock::time_point deadline, bool* nothing_received) {
    *nothing_received = false;
    bhttp::request<bhttp::string_body> req;
    const bhttp::verb verb = bhttp::string_to_verb(r.method);
    if (verb == bhttp::verb::unknown) {
      if (r.method.empty()) return make_error(ErrorCode::kInvalidArgument, "empty HTTP method");
      req.method_string(r.method);
    } else {
      req.method(verb);
    }
    req.target(r.path);
    req.version(11);
    req.set(bhttp::field::host, r.host + ":" + std::to_string(r.port));
    req.set(bhttp::field::accept, "*/*");
    req.keep_alive(keep_alive);
    for (const auto& [name, value] : r.headers) req.set(name, value);
    if (!r.body.empty()) req.set(bhttp::field::content_type, "application/json");
    req.body() = r.body;
    if (!r.body.empty() || verb == bhttp::verb::post) req.content_length(r.body.size());

    stream->expires_at(deadline);
    // A server may answer (413, 400) and close before reading an over-limit body: a failed
    // write is reported only when no response can be read either.
    const beast::error_code write_ec = run([&](auto handler) { bhttp::async_write(*stream, req, handler); });

    bhttp::response_parser<bhttp::buffer_body> parser;
    parser.header_limit(1 << 20);
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser.skip(verb == bhttp::verb::head);  // a HEAD answer has no body, whatever its Content-Length
    beast::error_code ec = run([&](auto handler) { bhttp::async_read_header(*stream, buffer, parser, handler); });
    if (ec) {
      *nothing_received = !parser.got_some();
      close();
      if (write_ec) return transport_error(write_ec, "send");
      if (ec == bhttp::error::end_of_stream) return make_error(ErrorCode::kUnavailable, "connection closed before the response headers");
      return transport_error(ec, "read");
    }
    Response resp;
    resp.status = static_cast<int>(parser.get().result_int());
    if (auto it = parser.get().find(bhttp::field::content_type); it != parser.get().end()) resp.content_type = std::string(it->value());
    char buf[16384];
    while (!parser.is_done()) {
      parser.get().body().data = buf;
      parser.get().body().size = sizeof buf;
      // read_some: returns as soon as some of the body arrived (streamed events are delivered
      // when they come, not when the buffer is full).
      ec = run([&](auto handler) { bhttp::async_read_some(*stream, buffer, parser, handler); });
      if (ec == bhttp::error::need_buffer) ec = {};
      const size_t got = sizeof buf - parser.get().body().size;
      if (ec) {
        close();
        if (ec == bhttp::error::partial_message) return make_error(ErrorCode::kUnavailable, "connection closed in the middle of the body");
        return transport_error(ec, "read");
      }
      if (got == 0) continue;
      const std::string_view piece(buf, got);
      resp.body.append(piece);
      if (r.on_body && !r.on_body(piece)) {
        close();  // the caller went away
        return resp;
      }
    }
    if (!keep_alive || !parser.keep_alive()) close();
    return resp;
  }

  Result<Response> request(const Request& r, bool keep_alive) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(r.timeout_ms);
    const bool reused = keep_alive && connected_to(r);
    if (!reused) TS_TRY(connect(r, deadline));
    bool nothing_received = false;
    auto resp = exchange(r, keep_alive, deadline, &nothing_received);
    if (!resp.ok() && reused && nothing_received) {  // the server closed the idle connection
      TS_TRY(connect(r, deadline));
      return exchange(r, keep_alive, deadline, &nothing_received);
    }
    return resp;
  }
};

Client::Client() : impl_(std::make_unique<Impl>()) {}
Client::~Client() = default;

Result<Response> Client::request(const Request& r) { return impl_->request(r, /*keep_alive=*/true); }

Result<Response> request(const Request& r) {
  Client::Impl impl;
  return impl.request(r, /*keep_alive=*/false);
}

void SseParser::feed(std::string_view bytes, const std::function<void(const std::string&)>& on_data) {
  buffer_.append(bytes);
  for (;;) {
    size_t end = buffer_.find("\n\n");
    if (end == std::string::npos) return;
    std::string event = buffer_.substr(0, end);
    buffer_.erase(0, end + 2);
    std::string data;
    size_t pos = 0;
    while (pos <= event.size()) {
      size_t eol = event.find('\n', pos);
      std::string line = event.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) == 0) {
        std::string v = line.substr(5);
        if (!v.empty() && v.front() == ' ') v.erase(0, 1);
        if (!data.empty()) data += '\n';
        data += v;
      }
      if (eol == std::string::npos) break;
      pos = eol + 1;
    }
    if (!data.empty()) on_data(data);
  }
}

}  // namespace tessera::http
