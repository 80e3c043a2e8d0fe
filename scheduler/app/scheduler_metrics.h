// The tessera-scheduler's Prometheus metrics, each defined where it is declared
// (scheduler_metrics.cpp). Per-worker and labelled series (pages by state, routed requests,
// requests by finish reason, preference fills) are created by the component that owns the label.
//
// Ownership/threading: the pointers are into a metrics::Registry that outlives every component;
// the values are atomic, updated by the event-loop thread and rendered by the /metrics thread.
#pragma once

#include "tessera/common/metrics.h"

namespace tessera::scheduler_app {

struct SchedulerMetrics {
  metrics::Registry* registry = nullptr;
  metrics::Gauge* live_workers = nullptr;
  metrics::Gauge* running = nullptr;
  metrics::Gauge* waiting = nullptr;
  metrics::Counter* prompt_tokens = nullptr;
  metrics::Counter* cached_tokens = nullptr;
  metrics::Gauge* hit_rate = nullptr;
  metrics::Histogram* step_seconds = nullptr;
  metrics::Histogram* compute_seconds = nullptr;
  metrics::Histogram* ttft_seconds = nullptr;
  metrics::Counter* bad_frontend = nullptr;
  metrics::Counter* bad_worker = nullptr;
  metrics::Counter* peer_dead = nullptr;
  metrics::Counter* requeued = nullptr;
  metrics::Counter* migrated = nullptr;
  metrics::Counter* preemptions = nullptr;
  metrics::Counter* kv_evicted = nullptr;      // K/V policies (docs/kv.md)
  metrics::Counter* kv_compactions = nullptr;
  metrics::Counter* generated_tokens = nullptr;
  metrics::Gauge* kv_usage = nullptr;
  // Page totals over all workers, as of the last WorkerRegistry::publish() (event-loop thread only).
  int64_t pages_free = 0, pages_held = 0, pages_cached = 0;
  int64_t finished_requests = 0;  // requests ended, any reason (event-loop thread only; heartbeat totals)

  static SchedulerMetrics create(metrics::Registry& registry);
};

}  // namespace tessera::scheduler_app
