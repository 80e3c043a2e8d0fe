// The worker's Prometheus series (docs/operations.md "Worker metrics"), served on
// --metrics-host/--metrics-port by tessera_metrics_http. Every series exists from start-up
// (zero until the first step); each carries the labels worker and model.
//
//   tessera_worker_info{backend,kernel_isa}      1: the backend and the kernel path in use
//   tessera_worker_step_seconds                  StepExecutor::execute time of one step plan
//   tessera_worker_batch_size                    sequences computed in one step
//   tessera_worker_step_tokens                   tokens computed in one step (prefill + decode)
//   tessera_worker_steps_total{result=ok|error}  step plans executed / refused
//   tessera_worker_tokens_total                  tokens computed, over all steps
//   tessera_worker_kv_pages{state=total|used}    pool size; pages in the block tables of the
//                                                requests the worker holds state for
//   tessera_worker_resident_memory_bytes         the process's RSS (/proc/self/statm), at scrape
//   tessera_worker_registered, _draining         0/1: registered with the scheduler; draining
//   tessera_worker_scheduler_switches_total      times it moved to another scheduler of its
//                                                --scheduler list (its own died or never answered)
//
// Threading: on_step() runs on the compute thread only (it alone touches the block tables);
// set_registered()/set_draining() on the service thread; render() on the metrics server's
// thread. The series are atomics inside the Registry, which outlives this object.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/common/metrics.h"
#include "tessera/common/step_plan.h"
#include "tessera/worker/blend.h"

namespace tessera::worker_app {

struct WorkerMetricsInfo {
  std::string worker;      // --name
  std::string model;       // the model file's name, without directory
  std::string backend;     // cpu, cuda, cuda-tp
  std::string kernel_isa;  // scalar, avx2, avx512 (cpu), cuda
  int32_t num_pages = 0;
  std::string kv_dtype;     // page dtype: f32, f16, int8 (cpu); the cuda backends' --cuda-dtype
  int64_t kv_pool_bytes = 0;  // bytes of the page pool (0 = not known)
};

class WorkerMetrics {
 public:
  WorkerMetrics(metrics::Registry& registry, const WorkerMetricsInfo& info);

  // After StepExecutor::execute(plan): its time and whether it was applied.
  void on_step(const StepPlan& plan, double seconds, bool ok);
  // The executor dropped every request's state (registered again): so do the block tables.
  void reset_requests();
  // CacheBlend counters after a step (the backend's cumulative BlendStats; docs/kv.md).
  void on_blend(const worker::BlendStats& s);
  void set_registered(bool registered) { registered_->set(registered ? 1 : 0); }
  void set_draining(bool draining) { draining_->set(draining ? 1 : 0); }
  void scheduler_switched() { switches_->inc(); }
  bool registered() const { return registered_->value() != 0; }
  bool draining() const { return draining_->value() != 0; }
  // The exposition text, RSS read now.
  std::string render() const;

 private:
  metrics::Registry& registry_;
  metrics::Histogram* step_seconds_;
  metrics::Histogram* batch_size_;
  metrics::Histogram* step_tokens_;
  metrics::Counter* steps_ok_;
  metrics::Counter* steps_error_;
  metrics::Counter* tokens_;
  metrics::Gauge* pages_used_;
  metrics::Gauge* rss_;
  metrics::Gauge* registered_;
  metrics::Gauge* draining_;
  metrics::Counter* switches_;
  metrics::Counter* blend_prefills_;
  metrics::Counter* blend_hits_;
  metrics::Counter* blend_misses_;
  metrics::Counter* blend_evictions_;
  metrics::Counter* blend_reused_;
  metrics::Counter* blend_recomputed_;
  metrics::Gauge* blend_chunks_;
  metrics::Gauge* blend_bytes_;
  const int32_t num_pages_;
  std::unordered_map<uint64_t, std::vector<int32_t>> tables_;  // compute thread: request -> block table
  std::vector<uint8_t> marks_;                                  // compute thread: scratch, one per page
};

}  // namespace tessera::worker_app
