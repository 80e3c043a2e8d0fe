#include "offload_metrics.h"

namespace tessera::worker_app {
namespace {
const char* kPagesHelp = "K/V offload pages: spilled (read for the kvstore), offloaded (stored), dropped (queue full), "
                         "failed (encode or put), reloaded (loaded into the pool), missed (a reload stopped there), "
                         "refused (a fetched blob held another prefix's K/V: tag mismatch, also missed)";
}  // namespace

OffloadMetrics::OffloadMetrics(metrics::Registry& registry, const std::string& worker)
    : r_(registry), base_{{"worker", worker}} {
  publish({});
}

void OffloadMetrics::publish(const worker::OffloadWorkerStats& now) {
  std::lock_guard lock(mu_);
  auto with = [&](const char* k, const char* v) {
    metrics::Labels l = base_;
    l.emplace_back(k, v);
    return l;
  };
  auto bump = [&](const std::string& name, const char* help, const metrics::Labels& labels, double value, double seen) {
    metrics::Counter& c = r_.counter(name, help, labels);
    if (value > seen) c.inc(value - seen);
  };
  const std::string pages = "tessera_worker_kv_offload_pages_total";
  auto d = [](uint64_t x) { return static_cast<double>(x); };
  bump(pages, kPagesHelp, with("event", "spilled"), d(now.spilled_pages), d(seen_.spilled_pages));
  bump(pages, kPagesHelp, with("event", "offloaded"), d(now.offloaded_pages), d(seen_.offloaded_pages));
  bump(pages, kPagesHelp, with("event", "dropped"), d(now.spill_dropped), d(seen_.spill_dropped));
  bump(pages, kPagesHelp, with("event", "failed"), d(now.spill_failed), d(seen_.spill_failed));
  bump(pages, kPagesHelp, with("event", "reloaded"), d(now.reloaded_pages), d(seen_.reloaded_pages));
  bump(pages, kPagesHelp, with("event", "missed"), d(now.reload_missed_pages), d(seen_.reload_missed_pages));
  bump(pages, kPagesHelp, with("event", "refused"), d(now.mismatched_blobs), d(seen_.mismatched_blobs));
  const char* bytes_help = "K/V offload: encoded blob bytes put to / fetched from the kvstore";
  bump("tessera_worker_kv_offload_bytes_total", bytes_help, with("direction", "put"), d(now.offloaded_bytes),
       d(seen_.offloaded_bytes));
  bump("tessera_worker_kv_offload_bytes_total", bytes_help, with("direction", "get"), d(now.reload_bytes), d(seen_.reload_bytes));
  bump("tessera_worker_kv_offload_raw_bytes_total", "K/V offload: bytes of the stored pages before the codec (blob dtype)",
       base_, d(now.offloaded_raw_bytes), d(seen_.offloaded_raw_bytes));
  bump("tessera_worker_kv_offload_reloads_total", "K/V offload: reload directives executed", base_, d(now.reloads),
       d(seen_.reloads));
  bump("tessera_worker_kv_offload_reload_seconds_total", "K/V offload: time spent reloading (kvstore gets, decode, pool writes)",
       base_, now.reload_ms / 1000.0, seen_.reload_ms / 1000.0);
  seen_ = now;
}

}  // namespace tessera::worker_app
