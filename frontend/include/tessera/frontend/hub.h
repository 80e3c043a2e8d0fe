// The hub: the one thread of the frontend that owns every ZeroMQ socket of the process — the
// scheduler links (scheduler_links.h) and the ROUTER of the client API — so no socket is ever
// touched by two threads (ZeroMQ's rule). On that thread it also keeps the in-flight table
// (inflight_table.h) and the ring choice (scheduler_ring.h). Other threads talk to it through a
// locked command queue and an inproc wake-up socket.
//
// What the hub thread does (docs/protocol.md, "Frontend <-> scheduler"):
// - heartbeats each scheduler and applies the liveness rule of its link; a scheduler that goes
//   dead, or restarts (new `instance`), has each of its in-flight requests failed with
//   ErrorEvent kPeerDead, and new requests go elsewhere;
// - keeps the ring equal to the usable schedulers; a request goes to the owner of its routing
//   key there (routing_hash of the key, common/routing.h), or — when the owner already holds
//   (1 + load_epsilon) x the mean of this frontend's in-flight requests — to the next one
//   clockwise under that cap (bounded loads, scheduler_ring.h);
// - follows the scheduler membership (discovery.h: static endpoints, dns: names re-resolved,
//   file: lists re-read every scheduler_refresh_ms): joining schedulers get a link, leaving
//   ones take no new request and are closed once their requests ended (scheduler_links.h);
// - routes the schedulers' token/final/error events to the sinks of the in-flight table;
// - hands every client-API message (already split from its envelope) to the ClientHandler.
//
// Life cycle: create() binds and connects every socket but starts no thread; start() starts
// the hub thread, and must be called once everything the ClientHandler and the sinks reach is
// fully constructed. stop() (or the destructor) joins it; in-flight sinks then get ErrorEvent
// kUnavailable, on the hub thread, while the Hub is still whole.
//
// Ownership: the Hub owns its zmq context, sockets and thread; sinks are shared with the
// caller and released after their final/error event. Thread-safety: every public method may be
// called from any thread; RequestSink and ClientHandler callbacks run on the hub thread and must
// not block.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/common/curve.h"
#include "tessera/common/metrics.h"
#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/frontend/inflight_table.h"
#include "tessera/frontend/scheduler_links.h"

namespace tessera::frontend {

struct HubConfig {
  // Where the schedulers are (discovery.h): "tcp://127.0.0.1:7100", "dns:NAME:PORT", "file:PATH".
  std::vector<std::string> scheduler_endpoints;
  int scheduler_refresh_ms = 5000;  // dns:/file: sources are read again this often
  double load_epsilon = 0.25;       // ring load bound: (1 + eps) x mean in-flight; <= 0 = off
  std::string client_endpoint;                   // ROUTER bind for the client API; "" = none
  int heartbeat_ms = 500;
  int dead_after_ms = 1500;
  std::string name = "frontend";
  curve::Keys keys;             // this frontend's keys (curve.h); insecure = plain sockets
  curve::ClientKeys to_schedulers;  // keys.client_of(kScheduler)
  bool client_curve = false;    // the client API is a CURVE server admitting the client keys
};

class Hub {
 public:
  // Called on the hub thread for every client-API message.
  using ClientHandler = std::function<void(zmqu::Envelope)>;

  // Sets up the sockets (no thread yet). kInvalidArgument for a bad config.
  static Result<std::unique_ptr<Hub>> create(HubConfig config, metrics::Registry& metrics);
  ~Hub();  // stop()s
  Hub(const Hub&) = delete;
  Hub& operator=(const Hub&) = delete;

  // Starts the hub thread; `on_client` receives the client-API messages. Call once.
  void start(ClientHandler on_client);
  // Stops the hub thread; every in-flight sink gets ErrorEvent kUnavailable. Idempotent.
  void stop();

  bool ready() const;
  int32_t waiting() const;  // requests queued at schedulers (last heartbeats)
  std::vector<SchedulerStatus> schedulers() const;
  const std::string& client_endpoint() const { return client_endpoint_; }  // as bound ("tcp://127.0.0.1:41234")

  uint64_t next_id() { return next_id_.fetch_add(1); }
  // Sends the request to a scheduler; every outcome (including "no scheduler") reaches `sink`.
  void submit(protocol::GenerateRequest request, std::shared_ptr<RequestSink> sink);
  // Asks the request's scheduler to stop it (its final/error event still arrives).
  void cancel(uint64_t id);
  // Forgets a request: no more events reach its sink (the scheduler is told to cancel it).
  void abandon(uint64_t id);
  // Sends an admin message (prefix_admin, docs/protocol.md) to the owner of its routing_key on
  // the ring, or with `to_all` to every usable scheduler, each copy under a fresh id; once each
  // has answered — its prefix_report, or an ErrorEvent (it died, or could not be reached) —
  // `done` gets every answer, on the hub thread (it must not block). No usable scheduler: `done`
  // gets one ErrorEvent kUnavailable.
  void gather(protocol::PrefixAdmin message, bool to_all, std::function<void(std::vector<protocol::Message>)> done);
  // Sends one encoded message to every listed scheduler, alive or not (fire and forget; an
  // unreachable one drops it). Returns how many schedulers were listed. Messages to one
  // scheduler keep their order, so a request submitted after a broadcast reaches its scheduler
  // after it.
  size_t broadcast(std::string body);
  // Sends a client-API reply. On the hub thread it is sent at once and false means the client
  // is gone (ROUTER_MANDATORY: unroutable) or not reading; elsewhere it is queued (true).
  bool send_to_client(const zmqu::Envelope& to, std::string body);

 private:
  struct Impl;
  explicit Hub(std::unique_ptr<Impl> impl, std::string client_endpoint);
  std::unique_ptr<Impl> impl_;
  std::atomic<uint64_t> next_id_{1};
  const std::string client_endpoint_;
};

}  // namespace tessera::frontend
