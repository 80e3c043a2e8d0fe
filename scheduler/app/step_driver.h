// The step driver: keeps every worker busy with one step plan at a time.
//
//   drive():      for each idle worker with work, plan a step (Batcher::step); a plan that
//                 needs nothing from the worker (only bookkeeping) is applied at once, any
//                 other is sent as `step_plan` and the worker is marked in flight;
//   on_result():  a worker's `step_result` for the plan in flight is recorded (step and compute
//                 time, preference-fill provenance), applied to its Batcher (StepOutcome), and
//                 the outcome is emitted to the frontends (RequestTable::emit).
// With `audit`, every Batcher invariant is checked after each plan and each apply (TS_CHECK).
//
// Ownership/threading: borrows the event loop's registry, table, sockets and metrics; used only
// by its thread.
#pragma once

#include "request_table.h"
#include "scheduler_metrics.h"
#include "sockets.h"
#include "worker_registry.h"

namespace tessera::scheduler_app {

class StepDriver {
 public:
  StepDriver(WorkerRegistry& workers, RequestTable& requests, Sockets& sockets, SchedulerMetrics& m, bool audit)
      : workers_(workers), requests_(requests), sockets_(sockets), m_(m), audit_(audit) {}

  // Sends each idle worker its next plan.
  void drive();
  // A worker answered a plan. Results for a plan not in flight are logged and ignored.
  void on_result(WorkerEntry& w, const StepResult& result);
  // K/V events (may be null): each plan's preference fills are reported to it when sent.
  void set_kv_events(KvEvents* events) { kv_events_ = events; }

 private:
  void audit(const WorkerEntry& w) const;

  WorkerRegistry& workers_;
  RequestTable& requests_;
  Sockets& sockets_;
  SchedulerMetrics& m_;
  bool audit_;
  KvEvents* kv_events_ = nullptr;
};

}  // namespace tessera::scheduler_app
