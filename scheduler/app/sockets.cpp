#include "sockets.h"

#include "tessera/common/zmq_util.h"

namespace tessera::scheduler_app {

Result<std::unique_ptr<Sockets>> Sockets::bind(const std::string& frontend_endpoint, const std::string& worker_endpoint,
                                               const curve::Keys& keys, metrics::Registry& registry) {
  std::unique_ptr<Sockets> s(new Sockets());
  s->keys_ = keys;
  if (keys.secure()) {
    TS_ASSIGN_OR_RETURN(s->auth_, curve::Authenticator::start(s->ctx_));
    const char* help = "connections refused at the CURVE handshake (public key not in the socket's allow-list)";
    TS_TRY(curve::serve(s->frontends_, s->auth_.get(), keys,
                        {.domain = "frontends", .admit = {curve::Role::kFrontend},
                         .refused = &registry.counter("tessera_scheduler_refused_peers_total", help, {{"socket", "frontends"}})}));
    TS_TRY(curve::serve(s->workers_, s->auth_.get(), keys,
                        {.domain = "workers", .admit = {curve::Role::kWorker},
                         .refused = &registry.counter("tessera_scheduler_refused_peers_total", help, {{"socket", "workers"}})}));
  }
  try {
    for (auto* sock : {&s->frontends_, &s->workers_}) {
      sock->set(zmq::sockopt::linger, 0);
      zmqu::limit_message_size(*sock);
      sock->set(zmq::sockopt::sndhwm, 1000000);
      sock->set(zmq::sockopt::rcvhwm, 1000000);
    }
    s->frontends_.bind(frontend_endpoint);
    s->workers_.bind(worker_endpoint);
    s->frontend_bound_ = s->frontends_.get(zmq::sockopt::last_endpoint);
    s->worker_bound_ = s->workers_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable,
                      "cannot bind '" + frontend_endpoint + "' / '" + worker_endpoint + "': " + e.what());
  }
  return s;
}

void Sockets::to_frontend(const std::string& identity, const protocol::Message& msg) {
  (void)zmqu::send(frontends_, {identity, protocol::encode(msg)}, /*dontwait=*/true);
}

void Sockets::to_worker(const std::string& name, const protocol::Message& msg) {
  (void)zmqu::send(workers_, {name, protocol::encode(msg)}, /*dontwait=*/true);
}

void Sockets::fail_client(const std::string& frontend, uint64_t client_id, ErrorCode code, std::string message) {
  to_frontend(frontend, protocol::ErrorEvent{.id = client_id, .code = code, .message = std::move(message)});
}

}  // namespace tessera::scheduler_app
