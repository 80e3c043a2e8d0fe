// The frontend's ZeroMQ side: one thread (the hub) owns every ZeroMQ socket of the process —
// a DEALER per scheduler and the ROUTER of the client API — so no socket is ever touched by two
// threads (ZeroMQ's rule). Other threads talk to the hub through a locked command queue and an
// inproc wake-up socket.
//
// Scheduler links (docs/protocol.md, "Frontend <-> scheduler"):
// - every heartbeat_ms the hub sends a Heartbeat to each scheduler; any message from a
//   scheduler marks it alive, and its Heartbeat replies carry live_workers and queue depth;
// - a scheduler silent for dead_after_ms is dead: each of its in-flight requests gets an
//   ErrorEvent kPeerDead, and new requests go elsewhere;
// - a scheduler whose heartbeat carries an `instance` other than the one it sent before has
//   restarted (within dead_after_ms): its in-flight requests are lost, so each gets an
//   ErrorEvent kPeerDead at once (logged); an absent instance (old scheduler) is ignored;
// - the per-worker figures of a scheduler's heartbeat become gauges in the registry given to
//   start(): tessera_frontend_scheduler_pages{scheduler,worker,state=free|held|cached} and
//   tessera_frontend_scheduler_requests{scheduler,worker,state=running|waiting} (0 for a worker
//   the last heartbeat did not list, and for every worker of a dead scheduler);
// - ready() is true while at least one live scheduler reports live_workers >= 1;
// - a request goes to the owner of its routing key on a consistent-hash ring (hash_ring.h) of
//   the ready schedulers: a scheduler joining or leaving moves only its own share of keys.
//
// Ownership: the Hub owns its sockets and thread; sinks are shared with the caller and released
// after their final/error event. Thread-safety: every public method may be called from any
// thread; RequestSink and ClientHandler callbacks run on the hub thread and must not block.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/common/metrics.h"
#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"

namespace tessera::frontend {

// Receives the scheduler's events of one request (TokenEvent, then one FinalEvent or
// ErrorEvent), on the hub thread.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void on_message(protocol::Message message) = 0;
};

struct HubConfig {
  std::vector<std::string> scheduler_endpoints;  // "tcp://127.0.0.1:7100"
  std::string client_endpoint;                   // ROUTER bind for the client API; "" = none
  int heartbeat_ms = 500;
  int dead_after_ms = 1500;
  std::string name = "frontend";
};

struct SchedulerStatus {
  std::string endpoint;
  bool alive = false;
  int32_t live_workers = 0;
  int32_t running = 0;
  int32_t waiting = 0;
};

class Hub {
 public:
  // Called on the hub thread for every client-API message (already split from its envelope).
  using ClientHandler = std::function<void(zmqu::Envelope)>;

  static Result<std::unique_ptr<Hub>> start(HubConfig config, metrics::Registry& metrics, ClientHandler on_client);
  ~Hub();  // stop()s
  // Stops the hub thread; every in-flight sink gets ErrorEvent kUnavailable (on the hub thread,
  // while this Hub is still whole). Idempotent.
  void stop();
  Hub(const Hub&) = delete;
  Hub& operator=(const Hub&) = delete;

  bool ready() const { return ready_.load(); }
  int32_t waiting() const { return waiting_.load(); }  // requests queued at schedulers (last heartbeats)
  std::vector<SchedulerStatus> schedulers() const;
  const std::string& client_endpoint() const { return client_endpoint_; }  // as bound ("tcp://127.0.0.1:41234")

  uint64_t next_id() { return next_id_.fetch_add(1); }
  // Sends the request to a scheduler; every outcome (including "no scheduler") reaches `sink`.
  void submit(protocol::GenerateRequest request, std::shared_ptr<RequestSink> sink);
  // Asks the request's scheduler to stop it (its final/error event still arrives).
  void cancel(uint64_t id);
  // Forgets a request: no more events reach its sink (the scheduler is told to cancel it).
  void abandon(uint64_t id);
  // Sends one encoded message to every configured scheduler, alive or not (fire and forget; an
  // unreachable one drops it). Returns how many schedulers it was queued for. Messages to one
  // scheduler keep their order, so a request submitted after a broadcast reaches its scheduler
  // after it.
  size_t broadcast(std::string body);
  // Sends a client-API reply. On the hub thread it is sent at once and false means the client
  // is gone (ROUTER_MANDATORY: unroutable) or not reading; elsewhere it is queued (true).
  bool send_to_client(const zmqu::Envelope& to, std::string body);

 private:
  struct Impl;
  explicit Hub(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> ready_{false};
  std::atomic<int32_t> waiting_{0};
  std::atomic<uint64_t> next_id_{1};
  std::string client_endpoint_;
  friend struct HubAccess;
};

}  // namespace tessera::frontend
