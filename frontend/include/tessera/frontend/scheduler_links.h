// Scheduler links: one per configured scheduler (docs/protocol.md, "Frontend <-> scheduler").
//
// A SchedulerLink owns the DEALER socket to its scheduler, its PeerLiveness (the one heartbeat
// rule, common/peer_liveness.h), the scheduler's instance id and last heartbeat figures, and the
// gauges published from them:
// - a heartbeat is due every heartbeat interval; any message from the scheduler counts as heard;
// - a scheduler never heard from is not alive (a fresh link does not count as alive);
// - one silent for dead_after is dead: check_dead() says so exactly once, its figures reset;
// - one whose connection dropped is dead at once (a socket monitor on the DEALER reports the
//   TCP disconnect: a killed scheduler is noticed in milliseconds, not after dead_after; its
//   in-flight requests are lost anyway, as a reconnection gets a new routing id):
//   check_disconnected() says so once, like check_dead(); the heartbeat timeout then only has
//   to catch a frozen or cut-off scheduler, so it can be generous (--scheduler-dead-ms);
// - a heartbeat whose `instance` differs from the one it sent before means it restarted (an
//   absent instance, i.e. an old scheduler, is ignored);
// - usable() = alive, reporting live_workers >= 1 and not `draining` (a scheduler that got
//   SIGTERM says so in a heartbeat it sends at once: it takes no new request, and its running
//   ones still end here);
// - gauges: tessera_frontend_scheduler_up{endpoint} and, per worker of its heartbeats,
//   tessera_frontend_scheduler_pages{scheduler,worker,state=free|held|cached} and
//   tessera_frontend_scheduler_requests{scheduler,worker,state=running|waiting} (0 for a worker
//   the last heartbeat did not list, and for every worker of a dead scheduler).
//
// SchedulerLinks holds them all and publishes a snapshot (ready, waiting, per-scheduler status)
// for other threads. Membership changes while the frontend runs (docs/architecture.md
// "Several schedulers"): set_listed() takes the discovered endpoints; a new one gets a link (a slot index
// that stays its own for the life of the process), one no longer listed is unlisted — it takes
// no new request but keeps its socket until its in-flight requests end (close_if_idle()), so a
// scheduler leaving the DNS records while it drains loses nothing. Closed slots are null.
//
// Ownership: each link owns its socket (created in the hub's zmq context, which must outlive
// the links). Threading: links are owned by the hub thread (ZeroMQ: one thread per socket);
// only ready(), waiting() and status() of SchedulerLinks may be called from other threads (they
// read the last publish()ed snapshot).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/common/curve.h"
#include "tessera/common/metrics.h"
#include "tessera/common/peer_liveness.h"
#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"

namespace tessera::frontend {

struct SchedulerStatus {
  std::string endpoint;
  bool listed = true;  // in the discovered membership (an unlisted one finishes its requests)
  bool alive = false;
  int32_t live_workers = 0;
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t context_length = 0;  // from its heartbeats (0 = not said yet)
  int32_t page_size = 0;
  std::string name;                               // the scheduler's --name ("" until heard)
  std::vector<protocol::WorkerStats> workers;     // from its last heartbeat (empty when dead)
  std::optional<protocol::SchedulerTotals> totals;  // from its last heartbeat (an older scheduler: none)
};

class SchedulerLink {
 public:
  using Clock = std::chrono::steady_clock;

  // Connects a DEALER to `endpoint` (throws zmq::error_t on a bad endpoint).
  // `curve`: the scheduler's public key and ours (curve.h); empty = a plain socket.
  SchedulerLink(zmq::context_t& ctx, std::string endpoint, LivenessConfig liveness, metrics::Registry& registry,
                const curve::ClientKeys& curve = {});
  ~SchedulerLink();
  SchedulerLink(const SchedulerLink&) = delete;
  SchedulerLink& operator=(const SchedulerLink&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  zmq::socket_t& socket() { return socket_; }

  // Something arrived from the scheduler.
  void heard(Clock::time_point now);
  // Its heartbeat reply: keeps the figures, updates the gauges. True when the scheduler
  // restarted since its previous heartbeat (its in-flight requests are lost).
  bool on_heartbeat(const protocol::Heartbeat& heartbeat);
  // True exactly once when the scheduler goes silent for dead_after (figures and gauges reset).
  bool check_dead(Clock::time_point now);
  // Reads the socket monitor's events (never blocks); true exactly once when the connection to
  // an alive scheduler dropped (figures and gauges reset, as check_dead).
  bool check_disconnected();
  zmq::socket_t& monitor() { return monitor_; }  // polled by the hub for ZMQ_POLLIN
  // Sends our heartbeat when one is due (never blocks); true when it did.
  bool beat_if_due(Clock::time_point now, uint64_t seq, const std::string& name);
  std::chrono::milliseconds until_beat(Clock::time_point now) const { return liveness_.until_beat(now); }

  bool alive() const { return heard_ && liveness_.alive(); }
  bool usable() const { return listed_ && alive() && last_.live_workers >= 1 && !last_.draining; }
  bool draining() const { return last_.draining; }
  bool listed() const { return listed_; }
  void set_listed(bool listed) { listed_ = listed; }
  // The ring choice made for a request: counted in
  // tessera_frontend_scheduler_routed_requests_total{scheduler,reason=owner|spill}.
  void routed(bool spilled) { (spilled ? routed_spill_ : routed_owner_).inc(); }
  void set_inflight(int64_t n) { inflight_.set(static_cast<double>(n)); }
  const protocol::Heartbeat& last() const { return last_; }

 private:
  void publish_worker_gauges();
  void mark_dead(const std::string& why);

  std::string endpoint_;
  zmq::socket_t socket_;
  zmq::socket_t monitor_;  // PAIR: the DEALER's ZMQ_EVENT_DISCONNECTED events
  PeerLiveness liveness_;
  bool heard_ = false;     // something arrived at least once
  bool listed_ = true;     // in the discovered membership (else: no new requests, closed when idle)
  uint64_t instance_ = 0;  // from its heartbeats; 0 = not seen yet (or an old scheduler)
  protocol::Heartbeat last_;
  metrics::Registry& registry_;
  metrics::Gauge& up_;
  metrics::Counter& routed_owner_;
  metrics::Counter& routed_spill_;
  metrics::Gauge& inflight_;
  struct WorkerGauges {
    metrics::Gauge *free, *held, *cached, *running, *waiting;
  };
  std::map<std::string, WorkerGauges> worker_gauges_;
};

class SchedulerLinks {
 public:
  // kInvalidArgument for a duplicate endpoint or a bad liveness config. `endpoints` may be empty
  // (discovery has found none yet).
  static Result<std::unique_ptr<SchedulerLinks>> create(zmq::context_t& ctx, const std::vector<std::string>& endpoints,
                                                        LivenessConfig liveness, metrics::Registry& registry,
                                                        const curve::ClientKeys& curve = {});

  // Slots ever used (open or closed); a slot's index never changes.
  size_t size() const { return links_.size(); }
  bool open(size_t i) const { return links_[i] != nullptr; }
  SchedulerLink& operator[](size_t i) { return *links_[i]; }  // only while open(i)
  const SchedulerLink& operator[](size_t i) const { return *links_[i]; }
  std::vector<std::string> endpoints() const;  // by slot, closed ones included
  size_t listed_count() const { return listed_count_.load(); }

  struct Change {
    std::vector<size_t> joined;  // slots listed now and not before (new or reopened)
    std::vector<size_t> left;    // slots listed before and not now
  };
  // Makes exactly `endpoints` the listed ones (see above). An endpoint whose socket cannot be
  // set up (ZeroMQ refuses it) is logged and left out.
  Change set_listed(const std::vector<std::string>& endpoints);
  // Closes slot i when it is open, unlisted and `inflight` is 0; true when it did.
  bool close_if_idle(size_t i, int64_t inflight);

  // Hub thread: recomputes the snapshot below from the links.
  void publish();
  // Any thread: the last published snapshot.
  bool ready() const { return ready_.load(); }          // some scheduler is usable
  int32_t waiting() const { return waiting_.load(); }  // requests queued at alive schedulers
  std::vector<SchedulerStatus> status() const;

 private:
  SchedulerLinks(zmq::context_t& ctx, LivenessConfig liveness, metrics::Registry& registry, curve::ClientKeys curve)
      : ctx_(ctx), liveness_(liveness), registry_(registry), curve_(std::move(curve)) {}
  zmq::context_t& ctx_;
  const LivenessConfig liveness_;
  metrics::Registry& registry_;
  const curve::ClientKeys curve_;
  std::vector<std::unique_ptr<SchedulerLink>> links_;  // null = closed
  std::vector<std::string> slot_endpoints_;            // by slot
  std::atomic<size_t> listed_count_{0};
  std::atomic<bool> ready_{false};
  std::atomic<int32_t> waiting_{0};
  mutable std::mutex status_mu_;
  std::vector<SchedulerStatus> status_;  // GUARDED_BY(status_mu_)
};

}  // namespace tessera::frontend
