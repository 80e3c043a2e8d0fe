// The scheduler's HTTP endpoint for Prometheus scraping, on Boost.Beast: GET /metrics renders
// the registry (text format 0.0.4), GET /health answers 200 {"status":"ok",...} while the event
// loop iterates (503 {"status":"stalled",...} once its latest iteration is older than
// `stall_ms`), HEAD is GET without the body, anything else 404. HTTP/1.1, one request per
// connection (`Connection: close`; a scrape every few seconds needs nothing more).
//
// Slow clients: connections are served concurrently (one coroutine each); a request must arrive
// within kReadTimeout (2 s) of the connection and its answer be taken within kWriteTimeout (5 s),
// else the connection is closed; at most kMaxConnections (128) are open at once, a connection
// over that is closed at once. So a client trickling bytes holds one connection for 2 s at most
// and never delays another's scrape.
//
// Addresses: `host` is an IPv4 or IPv6 literal ("127.0.0.1", "::1", "0.0.0.0", "::") or a name
// that resolves to one; an IPv6 socket is dual-stack (v6_only off), so "::" also serves IPv4.
//
// Ownership/threads: MetricsServer owns its io_context, acceptor and one thread that runs them;
// the Registry is borrowed (thread-safe render()) and must outlive the server. Destruction
// stops the thread and closes every connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/common/metrics.h"
#include "tessera/common/result.h"

namespace tessera::scheduler_app {

// What /health reports: `loop_heartbeat` (may be null: /health then always 200) is the event
// loop's latest iteration in steady-clock ms (Service::loop_heartbeat); it must outlive the server.
struct LoopHealth {
  const std::atomic<int64_t>* loop_heartbeat = nullptr;
  int64_t stall_ms = 5000;
};

class MetricsServer {
 public:
  // port 0 = any free port. kInvalidArgument for a host that is no address and does not
  // resolve; kUnavailable when the address cannot be bound.
  // See LoopHealth.
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& host, int port, const metrics::Registry& registry,
                                                      LoopHealth health = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const;  // as bound

  struct State;

 private:
  explicit MetricsServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tessera::scheduler_app
