// The tessera-scheduler process: the scheduler core (one Batcher per worker, one Router) between
// frontends and workers, over ZeroMQ/msgpack (docs/protocol.md, "Scheduler").
//
// Sockets: two ROUTERs. `frontend_endpoint` takes frontends (and any client that speaks the
// frontend<->scheduler messages: completion/chat with prompt_tokens filled, cancel, heartbeat);
// `worker_endpoint` takes workers (register, heartbeat, step_result, shutdown). A worker's
// ZeroMQ routing id is its name.
//
// Components (each in a file pair of its own, joined by EventLoop, event_loop.h):
//   Sockets         the two ROUTER sockets and sending (sockets.h)
//   Intake          validation + K/V namespace policy + routing key (tessera/scheduler/intake.h,
//                   in the scheduler library, unit-tested)
//   WorkerRegistry  workers, their Batchers, the Router's ring, fingerprint rule, liveness
//   RequestTable    live requests, client-id mapping, token/final/error events (emit/finish/forget)
//   Failover        a dead worker's requests: re-queue the unstreamed, fail the rest (peer_dead)
//   StepDriver      one step plan in flight per worker: plan, send, apply the result
//   SchedulerMetrics  the Prometheus series; the /metrics server is metrics_http.h
//
// Threading: ONE event-loop thread (run()) owns both sockets, every Batcher, the Router and all
// request state; nothing here is shared with other threads except the metrics registry (atomic
// values; the /metrics HTTP thread only renders it) and the stop flag. Workers compute in their
// own processes, so one loop keeps every worker busy: each iteration reads what arrived, applies
// step results, and sends each idle worker its next plan (one plan in flight per worker).
//
// Request lifecycle: a request arriving from frontend F with id i gets an internal id (ids are
// unique per frontend only); the Router picks a worker (consistent hashing with bounded load,
// scored by cached prefix; the ring position comes from the wire field `routing_key`, router.h);
// its Batcher plans it; sampled tokens go back to F as `token` events carrying i, then one
// `final` (stop / length / cancelled) or `error`. A cancel from F frees every page at once
// (Batcher::cancel) and is answered by a `final` with "cancelled".
//
// Failure handling: workers and frontends heartbeat every heartbeat_ms; the scheduler answers
// each heartbeat. A worker silent for worker_dead_ms (or one that says `shutdown`, or registers
// again) is dead: every request it held is routed again and queued on a live worker — one that
// has not streamed a token yet as if new (at most 3 times), one that has after the tokens already
// sent (migration, at most max_migrations times; failover.h) — or ends with an `error` kPeerDead. New requests go to the
// remaining workers (or get kUnavailable when none is left). A frontend silent for
// frontend_dead_ms has its requests cancelled. Undecodable messages get an `error` reply (frontends) or are logged and counted
// (workers); nothing a peer sends takes the loop down.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/common/curve.h"
#include "tessera/common/metrics.h"
#include "tessera/common/result.h"
#include "tessera/scheduler/batcher.h"
#include "tessera/scheduler/router.h"

namespace tessera::scheduler_app {

class EventLoop;

struct ServiceConfig {
  std::string name = "scheduler";
  std::string frontend_endpoint = "tcp://127.0.0.1:8100";  // bind; port * = any free port
  std::string worker_endpoint = "tcp://127.0.0.1:8101";    // bind; port * = any free port
  int heartbeat_ms = 500;          // sent to workers in register_ack
  int worker_dead_ms = 3000;       // > heartbeat_ms
  int frontend_dead_ms = 5000;     // > heartbeat_ms
  int max_migrations = 2;          // moves of a streamed request off dead workers (0 = none: peer_dead)
  int32_t max_running = scheduler::BatcherConfig{}.max_running;  // per worker
  int32_t max_waiting = scheduler::BatcherConfig{}.max_waiting;  // per worker; more gets kOverloaded
  int32_t max_step_tokens = 0;     // per step; 0 = the worker's max_batch_tokens
  int32_t max_context = 0;         // 0 = the worker's max_seq_len
  int32_t max_pinned_pages = 0;    // per worker; pages pinned prefixes may lock (0 = half the pool)
  bool prefix_cache = true;        // false: every request gets its own K/V namespace (no reuse)
  scheduler::OffloadConfig kv_offload{};  // K/V offload directory (workers started with --kv-offload)
  bool audit = false;              // Batcher::check() after every step (slow; for tests)
  int stats_interval_s = 10;       // a stats log line this often; 0 = none
  int drain_timeout_s = 30;        // on stop: longest drain before exiting with requests still live
  scheduler::RouterConfig router;
  std::string kv_events_endpoint;           // PUB bind for K/V events ("" = off; docs/protocol.md "K/V events")
  std::string kv_events_snapshot_endpoint;  // ROUTER bind answering kv_snapshot (required with the above)
  curve::Settings curve;           // --curve-dir / --insecure (docs/security.md)
};

// What a drain did (run() returned): for the DRAINED line of main.cpp and the tests.
struct DrainSummary {
  bool drained = false;  // run() saw the stop flag (always, once it returned)
  int handed_back = 0;   // queued requests ended with peer_dead when the drain began
  int refused = 0;       // new requests refused with peer_dead during the drain
  int running = 0;       // requests running when it began (they finish, or are left)
  int left = 0;          // requests still live at the drain timeout (ended with peer_dead)
};

class Service {
 public:
  // Binds both sockets. Errors: kInvalidArgument (bad endpoint or config), kUnavailable (bind).
  static Result<std::unique_ptr<Service>> create(const ServiceConfig& config, metrics::Registry& metrics);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  std::string frontend_endpoint() const;  // as bound
  std::string worker_endpoint() const;    // as bound
  std::string kv_events_endpoint() const;           // as bound; "" when off
  std::string kv_events_snapshot_endpoint() const;  // as bound; "" when off

  // Serves until `stop` becomes true (checked at least every 50 ms), then drains (docs/operations.md
  // "Stopping a scheduler"): heartbeats `draining` to every frontend, hands its queued requests
  // back (peer_dead), lets the running ones finish up to drain_timeout_s, fails what is left with
  // kPeerDead and returns.
  void run(const std::atomic<bool>& stop);
  // Steady-clock milliseconds (since its epoch) at the end of the event loop's latest iteration;
  // the loop's construction before run(). Written by the loop thread, read by any (the /health server).
  const std::atomic<int64_t>& loop_heartbeat() const;
  DrainSummary drain_summary() const;  // after run() returned

 private:
  explicit Service(std::unique_ptr<EventLoop> loop);
  std::unique_ptr<EventLoop> loop_;
};

}  // namespace tessera::scheduler_app
