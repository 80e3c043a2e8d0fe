// The scheduler's HTTP endpoint for Prometheus scraping, on Boost.Beast: GET /metrics renders
// the registry (text format 0.0.4), GET /health answers {"status":"ok"}, anything else 404.
// HTTP/1.1, one request per connection (`Connection: close`; a scrape every few seconds needs
// nothing more), 5 s to read a request.
//
// Addresses: `host` is an IPv4 or IPv6 literal ("127.0.0.1", "::1", "0.0.0.0", "::") or a name
// that resolves to one; an IPv6 socket is dual-stack (v6_only off), so "::" also serves IPv4.
//
// Ownership/threads: MetricsServer owns its io_context, acceptor and one thread that runs them;
// the Registry is borrowed (thread-safe render()) and must outlive the server. Destruction
// stops the thread and closes every connection.
#pragma once

#include <memory>
#include <string>

#include "tessera/common/metrics.h"
#include "tessera/common/result.h"

namespace tessera::scheduler_app {

class MetricsServer {
 public:
  // port 0 = any free port. kInvalidArgument for a host that is no address and does not
  // resolve; kUnavailable when the address cannot be bound.
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

}  // namespace tessera::scheduler_app
