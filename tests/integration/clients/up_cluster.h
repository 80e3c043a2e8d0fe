// A real `tessera up` cluster on stories260K for the C++ client tests (conformance, install):
// `tessera up` (scheduler, one CPU worker, frontend; no kvstore) on a free block of loopback
// ports, plus, on request, a second tessera-frontend on the same scheduler (for failover).
//
// Ownership: owns the processes and their logs; the destructor stops them (SIGTERM, then
// SIGKILL). Not thread-safe, except metric()/http_post(), which only read the ports.
#pragma once

#include <memory>
#include <string>

#include "tessera/http/client.h"
#include "tessera/testing/process.h"

namespace tessera::testing {

class UpCluster {
 public:
  // Starts it and waits until ready; on failure ADD_FAILUREs with the logs and leaves ok() false.
  // `kvstore`: also start tessera-kvstore (stored preferences, admin routes).
  explicit UpCluster(bool second_frontend, bool kvstore = false);
  ~UpCluster();
  bool ok() const { return ok_; }

  int http_port() const { return base_; }
  std::string zmq_endpoint() const { return "tcp://127.0.0.1:" + std::to_string(base_ + 1); }
  std::string second_zmq_endpoint() const { return second_zmq_; }  // "" without a second frontend
  Process& second_frontend() { return *second_; }
  // The scheduler's samples of `name` whose labels contain `filter`, summed; -1 when unreadable.
  double metric(const std::string& name, const std::string& filter = "") const;
  // POST `json` to the tessera up frontend's HTTP API.
  Result<http::Response> http_post(const std::string& path, const std::string& json) const;
  std::string logs() const;

 private:
  int base_ = 0;  // http; +1 zmq; +2..+4 scheduler (frontends, workers, metrics); +5 kvstore
  std::string dir_;
  std::unique_ptr<Process> up_, second_;
  std::string second_zmq_;
  bool ok_ = false;
};

}  // namespace tessera::testing
