// Private: the ZeroMQ client API — the same requests as HTTP, as protocol v1 msgpack messages on
// the hub's ROUTER socket (docs/protocol.md, "Client API").
//
// Order (docs/protocol.md "Order"): the messages of one connection (one ROUTER identity) are
// handled in arrival order. On the hub thread, in arrival order, each request's client id is
// claimed in the (identity, client id) table — a second request with an id still in flight is
// refused there, never the first — and a cancel finds its request there, whatever stage the
// request is in. The slow part of a request (admission, tokenization, the stored-preference
// lookup) then runs on the I/O pool, concurrently with other requests; its outcome (the hand-off
// to the hub, or an error reply) is released through the connection's sequence: a request's
// outcome never overtakes that of an earlier request of the same connection. A request
// cancelled before its release is answered `final` "cancelled" without reaching a scheduler.
//
// Resubmission (docs/api.md "Failures"): a request that ends with `error` peer_dead — its
// scheduler died, restarted, or is draining and handed it back or refused it — before anything
// of it reached the client is submitted again, as the HTTP API does: under a new internal id
// (the (identity, client id) entry follows it, so a cancel still finds it), at most
// kMaxResubmits times, while some scheduler is usable and within request_timeout_ms of its
// arrival; each counts in tessera_frontend_requeued_requests_total. A request that has streamed
// keeps its error (or is migrated by its scheduler, when only its worker died).
//
// Ownership: references to components that outlive it (Frontend owns them all, and stops the
// I/O threads and the hub before destroying any). Threading: on_message() runs on the hub
// thread; the rest on the I/O pool and the kvstore executor. Both tables are guarded by mu_;
// outcomes are released (posted to the hub, which keeps their order) while holding it, and a
// cancel is posted while holding it too, so a cancel is never posted ahead of its request.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "frontend_metrics.h"
#include "tessera/frontend/api_keys.h"
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
    const ApiKeys& api_keys;
    int64_t request_timeout_ms = 300000;  // bounds resubmission (from the request's arrival)
  };
  static constexpr int kMaxResubmits = 2;  // as the HTTP API
  explicit ClientApi(Deps deps) : d_(deps) {}

  // Hub thread: one message from a client.
  void on_message(zmqu::Envelope env);

 private:
  class Sink;
  struct Pending {
    uint64_t id = 0;          // internal request id, once released to the hub (0 before)
    bool cancelled = false;   // the client cancelled it (before its release, or while it was resubmitted)
  };
  // One client connection's release sequence: outcomes leave in arrival order.
  struct Connection {
    uint64_t next_seq = 0;      // given to the next request that arrives
    uint64_t next_release = 0;  // the request whose outcome leaves next
    std::map<uint64_t, std::function<void()>> ready;  // finished out of order, waiting their turn
  };
  struct Job;  // one request between arrival and release

  void on_request(zmqu::Envelope env, protocol::GenerateRequest request);
  void on_cancel(const zmqu::Envelope& env, uint64_t client_id);
  void on_heartbeat(const zmqu::Envelope& env, uint64_t id);
  // On the I/O pool.
  void start(std::shared_ptr<Job> job);
  void prepared(std::shared_ptr<Job> job);
  void fail(const std::shared_ptr<Job>& job, Error e);
  // Queues `outcome` as request `seq` of `identity` and runs every outcome whose turn came,
  // under mu_.
  void release_in_order(const std::string& identity, uint64_t seq, std::function<void()> outcome);
  void submit_locked(const std::shared_ptr<Job>& job);  // under mu_
  void forget(const std::string& key);
  // The request's entry now names internal id `id` (a resubmission); false when the client
  // cancelled it meanwhile (or it is gone): then it is not submitted again.
  bool rebind(const std::string& key, uint64_t id);
  static std::string key_of(const std::string& identity, uint64_t client_id);

  Deps d_;
  std::mutex mu_;
  std::unordered_map<std::string, Pending> pending_;         // GUARDED_BY(mu_): (identity, client id) -> request
  std::unordered_map<std::string, Connection> connections_;  // GUARDED_BY(mu_): identity -> its sequence
};

}  // namespace tessera::frontend
