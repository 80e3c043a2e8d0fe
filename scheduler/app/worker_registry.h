// The scheduler's registered workers: one Batcher per worker, the Router's ring, each worker's
// liveness (PeerLiveness) and its one step plan in flight, and the page gauges.
//
// Rules it owns:
//   * the fingerprint rule: every registered worker serves the same model. A worker whose
//     model fingerprint differs from the others' is refused (admissible()); a worker that is the
//     only one registered may come back with another model (re-registration replaces it);
//   * registration builds the worker's Batcher from its RegisterWorker facts capped by the
//     scheduler's limits, and puts it on the ring; removal takes it off and zeroes its gauges;
//   * liveness: a worker is dead once silent for more than dead_after (check_dead(): each death
//     reported once); anything it sends counts as heard;
//   * placement: place() routes a Request over every live worker (Router::route with each
//     Batcher's load and cached prefix) and queues it on the chosen one, or keeps nothing;
//   * drain: a draining worker is off the ring (place() never picks it) and is not counted as
//     live, but keeps its Batcher until its requests are done (docs/operations.md "Drain").
//
// What it does NOT own: the requests themselves (RequestTable) and what happens to a removed
// worker's requests (Failover).
//
// Ownership/threading: owned by the event loop; used only by its thread. WorkerEntry pointers
// stay valid until that worker is removed.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kv_events.h"
#include "scheduler_metrics.h"
#include "tessera/common/peer_liveness.h"
#include "tessera/common/protocol.h"
#include "tessera/scheduler/batcher.h"
#include "tessera/scheduler/intake.h"
#include "tessera/scheduler/router.h"

namespace tessera::scheduler_app {

struct WorkerEntry {
  std::string name;  // == its ZeroMQ routing id
  protocol::RegisterWorker info;
  std::unique_ptr<scheduler::Batcher> batcher;
  PeerLiveness liveness;
  bool draining = false;   // off the ring: keeps its requests, gets no new ones (its `drain`)
  bool in_flight = false;  // a step plan was sent and its result has not come back
  uint64_t step_id = 0;    // of the plan in flight
  PeerLiveness::Clock::time_point sent_at{};
  metrics::Gauge* free_pages = nullptr;
  metrics::Gauge* held_pages = nullptr;
  metrics::Gauge* cached_pages = nullptr;
  metrics::Gauge* pinned_pages = nullptr;
  // Its Batcher's cumulative stats already added to the scheduler's counters (publish(), and
  // remove() for what it did since the last publish): counters take each worker's differences,
  // so a worker leaving neither loses the others' increments nor takes its own back.
  scheduler::BatcherStats published{};
};

struct WorkerLimits {
  int32_t max_running = 256;   // per worker
  int32_t max_waiting = 4096;  // per worker
  int32_t max_step_tokens = 0; // 0 = the worker's max_batch_tokens
  int32_t max_context = 0;     // 0 = the worker's max_seq_len
  int32_t max_pinned_pages = 0;  // 0 = half the worker's pool
  scheduler::OffloadConfig offload{};  // K/V offload directory (workers that advertise kv_offload)
};

class WorkerRegistry {
 public:
  WorkerRegistry(WorkerLimits limits, LivenessConfig liveness, scheduler::Router router, SchedulerMetrics& m);

  // The fingerprint rule; an error (kInvalidArgument) carries the reason to send back.
  Status admissible(const std::string& name, const protocol::RegisterWorker& reg) const;
  // Builds the worker's Batcher and puts it on the ring (`name` must not be registered). On
  // error nothing is kept. Returns the Batcher's config (for the log line).
  Result<scheduler::BatcherConfig> add(const std::string& name, const protocol::RegisterWorker& reg);
  // Takes a worker off the ring and forgets its Batcher (its counter increments since the last
  // publish() are counted first); false when it was not registered.
  bool remove(const std::string& name);
  // Takes a worker off the ring, keeping its Batcher and requests; false when not registered.
  bool begin_drain(const std::string& name);
  // Draining workers with no request left (running or waiting) and no plan in flight.
  std::vector<std::string> drained() const;

  WorkerEntry* find(const std::string& name);
  bool empty() const { return workers_.empty(); }
  std::map<std::string, WorkerEntry>& all() { return workers_; }
  const std::map<std::string, WorkerEntry>& all() const { return workers_; }

  // Vocabulary and fingerprint of the served model; nullopt with no worker registered.
  std::optional<scheduler::WorkerFacts> facts() const;
  const std::string& fingerprint() const { return fingerprint_; }  // 16 hex digits, "" when none

  // Routes `req` and queues it on the chosen worker; counts it in routed_requests_total.
  Result<scheduler::RouteDecision> place(scheduler::Request req);
  // Queues `req` on the named worker (kNotFound: not registered; kUnavailable: draining).
  Status place_on(const std::string& name, scheduler::Request req);

  // Names of the workers that just went silent for longer than dead_after (each reported once).
  std::vector<std::string> check_dead(PeerLiveness::Clock::time_point now);

  // K/V events (may be null; must outlive this registry): every Batcher built from now on
  // reports its radix index changes to it, and a removed worker's index is reported cleared.
  void set_kv_events(KvEvents* events) { kv_events_ = events; }

  // K/V offload (tessera/scheduler/kv_offload.h): one directory for all workers, so a worker can
  // reload what another spilled; it outlives every worker's Batcher (a removed worker's spills
  // stay reloadable). Batchers of workers that advertise "kv_offload" use it.
  scheduler::OffloadDirectory& offload() { return offload_; }

  // Refreshes the gauges (pages per worker, live workers, running, waiting, preemptions).
  void publish();
  // Adds the cluster figures (live workers, running, waiting, pages per worker) to `hb`.
  void fill_heartbeat(protocol::Heartbeat& hb) const;

 private:
  WorkerLimits limits_;
  LivenessConfig liveness_;
  scheduler::Router router_;
  SchedulerMetrics& m_;
  std::map<std::string, WorkerEntry> workers_;  // by name
  std::string fingerprint_;                     // of the registered workers (all equal); "" when none
  uint64_t fingerprint64_ = 0;                  // the same, as RegisterWorker sent it
  metrics::Counter* blend_steps_ = nullptr;      // CacheBlend counters (registered at construction)
  metrics::Counter* blend_fallbacks_ = nullptr;
  KvEvents* kv_events_ = nullptr;
  scheduler::OffloadDirectory offload_;
  scheduler::OffloadStats offload_seen_;  // published so far (counters take the differences)
  void publish_offload();
  void publish_counters(WorkerEntry& w);  // adds w's stats since w.published to the counters
};

}  // namespace tessera::scheduler_app
