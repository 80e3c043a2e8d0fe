// The scheduler's two ZeroMQ ROUTER sockets (docs/protocol.md, "Scheduler") and the one way to
// send on them: frontends (and any client speaking the frontend<->scheduler messages) on one,
// workers on the other; a worker's routing id is its name.
//
// Ownership/threading: owns its context and sockets; used only by the event-loop thread. Sends
// never block (ZMQ_DONTWAIT): a message to a peer whose queue is full or that is gone is
// dropped, and the peer's liveness rule deals with it.
#pragma once

#include <memory>
#include <string>

#include <zmq.hpp>

#include "tessera/common/protocol.h"
#include "tessera/common/result.h"

namespace tessera::scheduler_app {

class Sockets {
 public:
  // Binds both sockets (port * = any free port). kUnavailable when either cannot be bound.
  static Result<std::unique_ptr<Sockets>> bind(const std::string& frontend_endpoint, const std::string& worker_endpoint);

  void to_frontend(const std::string& identity, const protocol::Message& msg);
  void to_worker(const std::string& name, const protocol::Message& msg);
  // An `error` event for request `client_id` of `frontend`.
  void fail_client(const std::string& frontend, uint64_t client_id, ErrorCode code, std::string message);

  zmq::socket_t& frontends() { return frontends_; }
  zmq::socket_t& workers() { return workers_; }
  const std::string& frontend_endpoint() const { return frontend_bound_; }  // as bound
  const std::string& worker_endpoint() const { return worker_bound_; }      // as bound

 private:
  Sockets() = default;
  zmq::context_t ctx_{1};
  zmq::socket_t frontends_{ctx_, zmq::socket_type::router};
  zmq::socket_t workers_{ctx_, zmq::socket_type::router};
  std::string frontend_bound_, worker_bound_;
};

}  // namespace tessera::scheduler_app
