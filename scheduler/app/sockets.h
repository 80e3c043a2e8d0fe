// The scheduler's two ZeroMQ ROUTER sockets (docs/protocol.md, "Scheduler") and the one way to
// send on them: frontends (and any client speaking the frontend<->scheduler messages) on one,
// workers on the other; a worker's routing id is its name.
//
// Security (curve.h): with keys, both are CURVE servers; the frontend port admits the frontend
// keys (ZAP domain "frontends"), the worker port the worker keys ("workers"); a refused peer
// is counted in tessera_scheduler_refused_peers_total{socket}. authenticator() is the context's
// ZAP handler, for any further server socket made with context() (e.g. an events PUB):
// curve::serve(sock, sockets.authenticator(), sockets.keys(), {...}).
//
// Ownership/threading: owns its context, ZAP handler and sockets; used only by the event-loop thread. Sends
// never block (ZMQ_DONTWAIT): a message to a peer whose queue is full or that is gone is
// dropped, and the peer's liveness rule deals with it.
#pragma once

#include <memory>
#include <string>

#include <zmq.hpp>

#include "tessera/common/curve.h"
#include "tessera/common/metrics.h"
#include "tessera/common/protocol.h"
#include "tessera/common/result.h"

namespace tessera::scheduler_app {

class Sockets {
 public:
  // Binds both sockets (port * = any free port), CURVE servers when keys.secure().
  // kUnavailable when either cannot be bound; kInvalidArgument for missing allow-lists.
  static Result<std::unique_ptr<Sockets>> bind(const std::string& frontend_endpoint, const std::string& worker_endpoint,
                                               const curve::Keys& keys, metrics::Registry& registry);

  void to_frontend(const std::string& identity, const protocol::Message& msg);
  void to_worker(const std::string& name, const protocol::Message& msg);
  // An `error` event for request `client_id` of `frontend`.
  void fail_client(const std::string& frontend, uint64_t client_id, ErrorCode code, std::string message);

  zmq::socket_t& frontends() { return frontends_; }
  zmq::socket_t& workers() { return workers_; }
  zmq::context_t& context() { return ctx_; }
  const curve::Keys& keys() const { return keys_; }
  curve::Authenticator* authenticator() { return auth_.get(); }  // null when insecure
  const std::string& frontend_endpoint() const { return frontend_bound_; }  // as bound
  const std::string& worker_endpoint() const { return worker_bound_; }      // as bound

 private:
  Sockets() = default;
  zmq::context_t ctx_{1};
  curve::Keys keys_;
  std::unique_ptr<curve::Authenticator> auth_;  // destroyed before ctx_
  zmq::socket_t frontends_{ctx_, zmq::socket_type::router};
  zmq::socket_t workers_{ctx_, zmq::socket_type::router};
  std::string frontend_bound_, worker_bound_;
};

}  // namespace tessera::scheduler_app
