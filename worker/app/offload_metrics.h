// The worker's K/V offload series (docs/kv.md "K/V offload to the kvstore"), refreshed from
// KvOffloader::stats() at each scrape. Every series exists from start-up when --kv-offload is on.
//
//   tessera_worker_kv_offload_pages_total{event=spilled|offloaded|dropped|failed|reloaded|missed|refused}
//     (refused: a fetched blob whose tag names another prefix, also counted in missed)
//   tessera_worker_kv_offload_bytes_total{direction=put|get}   encoded blob bytes
//   tessera_worker_kv_offload_raw_bytes_total                  K/V bytes (blob dtype) of the pages put
//   tessera_worker_kv_offload_reloads_total                    KvReload directives executed
//   tessera_worker_kv_offload_reload_seconds_total             time spent reloading (gets + decode + writes)
//
// Threading: publish() from the metrics server's thread (serialized by its own mutex).
#pragma once

#include <mutex>
#include <string>

#include "tessera/common/metrics.h"
#include "tessera/worker/kv_offload.h"

namespace tessera::worker_app {

class OffloadMetrics {
 public:
  OffloadMetrics(metrics::Registry& registry, const std::string& worker);
  void publish(const worker::OffloadWorkerStats& now);

 private:
  metrics::Registry& r_;
  metrics::Labels base_;
  std::mutex mu_;
  worker::OffloadWorkerStats seen_;  // guarded by mu_
};

}  // namespace tessera::worker_app
