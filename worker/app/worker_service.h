// The tessera-worker process loop: one StepExecutor (over the chosen backend), one DEALER to the
// scheduler's worker ROUTER.
//
// Protocol (docs/protocol.md, "Scheduler <-> worker"): the worker sends `register` (resent every
// second until a `register_ack`), then executes every `step_plan` exactly as told and answers a
// `step_result` with the same id. A plan that cannot be decoded or fails validation in the engine
// is answered with a step_result whose error_code is set (the scheduler fails that step's
// sequences); the worker keeps serving. `register` carries the executor's capabilities
// (StepExecutor::capabilities(): the backend's name, "kv_fill", the sampling options); a plan
// that needs a capability the backend lacks is refused as a step_result error naming it. Heartbeats go out every heartbeat_ms (from the ack);
// a scheduler silent for dead_after_ms is presumed restarted: the worker registers again, and on
// every accepted register_ack after the first it drops all per-request executor state
// (StepExecutor::reset_requests, before the next plan) since the scheduler starts it afresh and a
// restarted scheduler reuses request ids.
//
// Drain (docs/operations.md "Drain"): SIGTERM/SIGINT (`stop_requested`) or a `drain` from the
// scheduler make the worker send `drain` to the scheduler, which routes nothing new to it and
// keeps planning the requests it holds; once they are all done the scheduler answers `shutdown`
// and the worker exits. It also exits at drain_timeout_s (its requests are then re-queued or
// failed by the scheduler, as for a dead worker), when the scheduler goes silent while it
// drains, or at once when it is not registered. `shutdown` from the scheduler: finish the
// current step and exit.
//
// Several schedulers (docs/architecture.md "Several schedulers"): `scheduler_endpoint` is a list of
// sources (discovery.h: endpoints, dns:NAME:PORT, file:PATH; re-read every refresh_ms). The
// worker registers with one scheduler at a time, the first of the list in its own order (a
// consistent-hash ring from its name: workers spread over the schedulers; or, with
// listed_order, the list's own order: the first is the worker's primary). It moves to the next
// one (passing over those that failed in the last 3 x dead_after_ms) when its scheduler's
// connection drops (a killed process: at once), when it is silent for dead_after_ms while
// registered (frozen, cut off), or when it does not answer `register` within dead_after_ms. So a
// worker serves again within dead_after_ms + one register round trip of its scheduler's death
// (milliseconds after a kill). A registered worker stays where it is when the list changes.
// Results of plans from a scheduler it has left are dropped (that scheduler is gone).
//
// Registration trouble is logged, naming the likely cause (watching the connection with a
// ZeroMQ socket monitor): no register_ack within dead_after_ms of trying logs a warning — "no
// connection" (nothing listens at the endpoint) or "connected but no answer" (another worker
// already uses this name: the scheduler's ROUTER ignores a second peer with the same routing
// id; or the peer is not a tessera-scheduler); repeated every 30 s while it lasts.
//
// Threads: the service thread (run()) owns the ZeroMQ sockets; one compute thread runs
// StepExecutor::execute so that heartbeats keep flowing during a long prefill. Plans go to the compute
// thread through a mutex-guarded slot; results come back over an inproc PAIR socket. At most one
// plan is in flight (the scheduler sends the next plan only after the previous result).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/common/curve.h"
#include "tessera/common/result.h"
#include "tessera/model/model.h"
#include "tessera/worker/step_executor.h"

namespace tessera::worker_app {

struct ServiceConfig {
  std::string scheduler_endpoint = "tcp://127.0.0.1:8101";  // comma-separated sources (above)
  int refresh_ms = 5000;          // dns:/file: sources are read again this often
  bool listed_order = false;      // true: the list's order (first = primary); false: ring order of the name
  std::string name;               // unique per scheduler
  int32_t max_batch_tokens = 1024;
  int32_t eos_id = -1;            // sent in register; -1 = none
  int heartbeat_ms = 500;         // until the ack says otherwise
  int dead_after_ms = 3000;       // scheduler silence (or unanswered register) that moves the worker on
  int drain_timeout_s = 30;       // longest drain before exiting with requests still held
  // Pacing, a demo/test knob (--min-step-ms): each step's result is sent no earlier than this
  // long after the step began, so a generation of N tokens lasts at least N x min_step_ms
  // (a test that must catch a request mid-stream gets a window that load cannot close). 0 = off.
  int min_step_ms = 0;
  curve::ClientKeys curve;        // the scheduler's public key and ours; empty = plain socket
};

class WorkerMetrics;

// Runs until drained, `shutdown` or the drain timeout. Borrowed model, executor and metrics
// (may be null) must outlive the call. Returns an error only for setup failures (bad endpoint)
// or a rejected registration.
Status run_service(const ServiceConfig& config, const Model& model, worker::StepExecutor& executor,
                   const std::atomic<bool>& stop_requested, WorkerMetrics* metrics = nullptr);

}  // namespace tessera::worker_app
