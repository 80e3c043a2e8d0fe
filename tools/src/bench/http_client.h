// A small blocking HTTP/1.1 client for `tessera bench` and the cluster integration tests:
// one request per connection (`Connection: close`), Content-Length and chunked bodies,
// incremental delivery of the body (for server-sent events) and a hard deadline on every read.
//
// Thread-safety: none per object; use one client object per thread. Functions are reentrant.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "tessera/common/result.h"

namespace tessera::bench {

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string body;  // the whole body (also when streamed through on_body)
};

struct HttpRequest {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string method = "GET";
  std::string path = "/";
  std::string body;                 // sent with Content-Type: application/json when non-empty
  int timeout_ms = 60000;           // whole request
  // Called with each piece of decoded body as it arrives; return false to close the connection
  // at once (a client that goes away). The response is then returned as read so far.
  std::function<bool(std::string_view)> on_body;
};

// Errors: kUnavailable (connect/read failures), kDeadlineExceeded, kMalformedMessage (not HTTP).
Result<HttpResponse> http_request(const HttpRequest& request);

// Splits a server-sent-event stream into `data:` payloads (one call per event).
class SseParser {
 public:
  // Feeds bytes; calls on_data for each complete event's data (multi-line data joined by '\n').
  void feed(std::string_view bytes, const std::function<void(const std::string&)>& on_data);

 private:
  std::string buffer_;
};

}  // namespace tessera::bench
