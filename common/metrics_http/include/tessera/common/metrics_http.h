// The small HTTP endpoint of the scheduler, worker and kvstore (library tessera_metrics_http,
// Boost.Beast): GET /metrics renders the Prometheus text (format 0.0.4), GET /health answers
// {"status":"ok"} (or the process's own liveness answer, e.g. the scheduler's event-loop check,
// loop_health()), GET /ready the process's readiness when it has one, HEAD is GET without the
// body, anything else 404. HTTP/1.1, one request per connection (`Connection: close`; a scrape
// every few seconds needs nothing more).
//
// Slow clients: connections are served concurrently (one coroutine each); a request must arrive
// within kReadTimeout (2 s) of the connection and its answer be taken within kWriteTimeout (5 s),
// else the connection is closed; at most kMaxConnections (128) are open at once, a connection
// over that is closed at once. So a client trickling bytes holds one connection for 2 s at most
// and never delays another's scrape (docs/security.md).
//
// Addresses: `host` is an IPv4 or IPv6 literal ("127.0.0.1", "::1", "0.0.0.0", "::") or a name
// that resolves to one; an IPv6 socket is dual-stack (v6_only off), so "::" also serves IPv4.
//
// Ownership/threads: MetricsServer owns its io_context, acceptor and one thread that runs them;
// the Registry (or the Endpoints' callbacks and what they reach) is borrowed, must outlive the
// server and is called on the server's thread (Registry::render() is thread-safe). Destruction
// stops the thread and closes every connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tessera/common/metrics.h"
#include "tessera/common/result.h"

namespace tessera::metrics_http {

// An answer of /health or /ready: status code and JSON body.
struct Answer {
  int status = 200;
  std::string body = "{\"status\":\"ok\"}";
};

// What the server answers. Each callback runs on the server's thread and must be thread-safe.
struct Endpoints {
  std::function<std::string()> metrics;  // GET /metrics: the exposition text (required)
  std::function<Answer()> health;        // GET /health; unset: 200 {"status":"ok"}
  std::function<Answer()> ready;         // GET /ready; unset: 404
};

// A /health answer for an event loop that stores its latest iteration (steady-clock ms) in
// `heartbeat`: 200 {"status":"ok","event_loop_ms_since_iteration":N,"stall_ms":B} while that is
// at most `stall_ms` old, else 503 {"status":"stalled",...}.
Answer loop_health(const std::atomic<int64_t>& heartbeat, int64_t stall_ms);

class MetricsServer {
 public:
  // port 0 = any free port. kInvalidArgument for a host that is no address and does not
  // resolve; kUnavailable when the address cannot be bound.
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& host, int port, Endpoints endpoints);
  // GET /metrics renders `registry`; /health answers 200.
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& host, int port, const metrics::Registry& registry);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const;  // as bound

  struct State;

 private:
  explicit MetricsServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tessera::metrics_http
