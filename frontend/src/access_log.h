// Private: the frontend's access log — one line per HTTP or ZeroMQ request when it ends
// (docs/operations.md "Access lines"). The user id is never written: only user_hash() of it.
// Threading: log_access() is thread-safe (one log::event call).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::frontend {

struct AccessRecord {
  std::string request_id;  // x-request-id (the client's or generated); the ZeroMQ client's id
  std::string client;      // peer address "ip:port" (HTTP) or "zmq"
  std::string method;      // HTTP method, or "zmq"
  std::string route;       // the path without the query
  int status = 0;          // HTTP status sent (0: none sent, e.g. the client went away first)
  bool generation = false;  // a completion request: the token fields below are meaningful
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t sequences = 1;   // scheduler requests behind it (n, best_of, a prompt list); logged when > 1
  std::optional<double> ttft_ms;
  std::string finish_reason;  // stop | length | cancelled | error | disconnect ("" if refused before submission)
  std::string user;           // raw; written as user_hash(user)
};

// 12 hex digits of a 64-bit hash of `user`; "" for "". Stable across processes and restarts.
std::string user_hash(std::string_view user);

// Writes the access event; `duration_ms` is arrival -> end. Probes (/health, /ready, /metrics)
// answered 2xx are logged at debug level, everything else at info.
void log_access(const AccessRecord& a, double duration_ms);

}  // namespace tessera::frontend
