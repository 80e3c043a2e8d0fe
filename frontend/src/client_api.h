// Private: the ZeroMQ client API — the same requests as HTTP, as protocol v1 msgpack messages on
// the hub's ROUTER socket (docs/protocol.md, "Client API").
//
// A GenerateRequest is handled off the hub thread, on the I/O thread pool: admission (429)
// first, then preparation (tokenization), readiness (503), the stored-preference lookup (on the
// kvstore executor, with its deadline; the request continues on the pool when it completes),
// then the hub. Its events come back on the hub thread and are sent to the client under the
// client's own id. A CancelRequest names that id; one that arrives while the request is still
// being prepared cancels it as soon as it reaches its scheduler.
//
// Ownership: references to components that outlive it (Frontend owns them all, and stops the
// I/O threads and the hub before destroying any). Threading: on_message() runs on the hub
// thread; the rest on the I/O pool and the kvstore executor. The (identity, client id) table is
// guarded by its mutex.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "frontend_metrics.h"
#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/frontend/admission.h"
#include "tessera/frontend/hub.h"
#include "tessera/frontend/request_preparer.h"
#include "tessera/frontend/stored_preferences.h"

namespace tessera::frontend {

class ClientApi {
 public:
  struct Deps {
    boost::asio::io_context& ioc;  // the I/O pool requests are prepared on
    Hub& hub;
    const RequestPreparer& preparer;
    Admission& admission;
    StoredPreferences& preferences;
    FrontendMetrics& metrics;
  };
  explicit ClientApi(Deps deps) : d_(deps) {}

  // Hub thread: one message from a client.
  void on_message(zmqu::Envelope env);

 private:
  class Sink;
  struct Pending {
    uint64_t id = 0;          // internal request id
    bool submitted = false;   // handed to the hub
    bool cancelled = false;   // the client cancelled it before that
  };
  // On the I/O pool.
  void start(zmqu::Envelope env, protocol::GenerateRequest request);
  void submit(zmqu::Envelope env, uint64_t client_id, protocol::GenerateRequest request, std::unique_ptr<Admission::Slot> slot);
  void forget(const std::string& key);
  static std::string key_of(const std::string& identity, uint64_t client_id);

  Deps d_;
  std::mutex mu_;
  std::unordered_map<std::string, Pending> pending_;  // GUARDED_BY(mu_): (identity, client id) -> request
};

}  // namespace tessera::frontend
