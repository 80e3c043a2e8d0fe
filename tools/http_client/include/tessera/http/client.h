// The one HTTP/1.1 client of Tessera (Boost.Beast): `tessera bench`, `tessera up` and the
// integration tests. Content-Length, chunked and until-EOF bodies; incremental delivery of the
// body (server-sent events); a hard deadline on every request; keep-alive connections.
//
//   http::Client client;  // one connection, reused while the server keeps it open
//   auto r = client.request({.port = 8000, .method = "POST", .path = "/v1/completions", .body = json});
//   auto m = http::request({.port = 8100, .path = "/metrics"});  // one request, one connection
//
// Thread-safety: a Client is used by one thread at a time (one client per thread); the free
// function request() is reentrant. A Client owns its connection and Asio context.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/common/result.h"

namespace tessera::http {

struct Response {
  int status = 0;
  std::string content_type;
  std::string body;  // the whole body (also when streamed through on_body)
};

struct Request {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string method = "GET";
  std::string path = "/";
  std::string body;                                          // sent as application/json when non-empty
  std::vector<std::pair<std::string, std::string>> headers;  // extra request headers
  int timeout_ms = 60000;                                    // the whole request
  // Called with each piece of decoded body as it arrives; return false to close the connection
  // at once (a client that goes away). The response is then returned as read so far.
  std::function<bool(std::string_view)> on_body;
};

// One request on a connection of its own (Connection: close). Errors as Client::request.
Result<Response> request(const Request& request);

// Errors of a request: kUnavailable (connect/read/write failures, the connection closed early),
// kDeadlineExceeded, kMalformedMessage (not HTTP), kInvalidArgument (an unknown method).
class Client {
 public:
  Client();
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends on the open connection when it goes to the same host:port and the server kept it
  // alive (a stale one is reopened once), else on a new connection.
  Result<Response> request(const Request& request);

 private:
  friend Result<Response> request(const Request& request);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Splits a server-sent-event stream into `data:` payloads (one call per event).
class SseParser {
 public:
  // Feeds bytes; calls on_data for each complete event's data (multi-line data joined by '\n').
  void feed(std::string_view bytes, const std::function<void(const std::string&)>& on_data);

 private:
  std::string buffer_;
};

}  // namespace tessera::http
