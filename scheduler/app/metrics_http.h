// A minimal HTTP/1.1 endpoint for Prometheus scraping: GET /metrics renders the registry,
// GET /health answers ok, anything else 404. One thread, one connection at a time,
// `Connection: close` (a scrape every few seconds needs nothing more).
//
// Ownership/threads: MetricsServer owns its listening socket and thread; the Registry is
// borrowed (thread-safe render()) and must outlive the server. Destruction stops the thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "tessera/common/metrics.h"
#include "tessera/common/result.h"

namespace tessera::scheduler_app {

class MetricsServer {
 public:
  // port 0 = any free port. kUnavailable when the address cannot be bound.
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& host, int port, const metrics::Registry& registry);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const { return port_; }

 private:
  MetricsServer(int fd, int port, const metrics::Registry& registry);
  void loop();

  int fd_;
  int port_;
  const metrics::Registry& registry_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tessera::scheduler_app
