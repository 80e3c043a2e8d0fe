// The scheduler's event loop: the one thread that owns every piece of scheduler state and
// joins the components, each iteration being
//   poll both sockets (at most 50 ms, less when a tick is due)
//   -> read_workers():   register / heartbeat / step_result / drain / shutdown (dispatch to
//                        WorkerRegistry, StepDriver, Failover)
//   -> read_frontends(): completion/chat (Intake -> WorkerRegistry::place -> RequestTable),
//                        cancel, heartbeat (answered with cluster figures), invalidate_user
//   -> StepDriver::drive(): each idle worker gets its next plan
//   -> tick() every min(heartbeat_ms, 250 ms): dead workers (Failover), silent frontends
//                        (their requests cancelled), gauges.
// Liveness of workers and frontends follows one rule (common/peer_liveness.h): a peer is dead
// once silent for more than its dead_after; anything it sends counts as heard.
//
// Ownership/threading: owns the sockets and every component; everything runs on the thread
// that calls run(). Only the metrics registry (atomic values) is shared, with the /metrics thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "failover.h"
#include "kv_events.h"
#include "prefix_pins.h"
#include "request_table.h"
#include "scheduler_metrics.h"
#include "service.h"
#include "sockets.h"
#include "step_driver.h"
#include "tessera/common/peer_liveness.h"
#include "tessera/common/zmq_util.h"
#include "tessera/scheduler/intake.h"
#include "worker_registry.h"

namespace tessera::scheduler_app {

class EventLoop {
 public:
  // `kv_events` may be null (K/V events off).
  EventLoop(const ServiceConfig& config, std::unique_ptr<Sockets> sockets, std::unique_ptr<KvEvents> kv_events,
            scheduler::Router router, metrics::Registry& registry);

  Sockets& sockets() { return *sockets_; }
  const KvEvents* kv_events() const { return kv_events_.get(); }
  // Serves until `stop` is true, then drains (service.h run()) and fails what is left with kPeerDead.
  void run(const std::atomic<bool>& stop);
  // See Service::loop_heartbeat (the only member read by another thread).
  const std::atomic<int64_t>& heartbeat() const { return heartbeat_; }
  DrainSummary drain_summary() const { return drain_; }  // after run() returned

 private:
  // ---- workers ----
  void read_workers();
  void on_worker(const std::string& name, protocol::Message msg);
  void on_register(const std::string& name, const protocol::RegisterWorker& reg);
  // Draining workers whose requests are all done get `shutdown` and are forgotten.
  void finish_drains();
  // ---- frontends ----
  void read_frontends();
  void on_frontend(const zmqu::Envelope& env, protocol::Message msg);
  void on_generate(const std::string& frontend, protocol::GenerateRequest r);
  void on_cancel(const std::string& frontend, uint64_t client_id);
  protocol::Heartbeat heartbeat(uint64_t id) const;
  // ---- periodic ----
  void tick();
  // The stats line, every config_.stats_interval_s (docs/operations.md "Stats lines").
  void log_stats(Clock::time_point now);
  // Stop seen: tells every frontend heard from (a heartbeat with `draining`) and hands back the
  // requests not yet scheduled (peer_dead: the frontends submit them again elsewhere).
  void begin_drain();
  void shutdown_all();

  const ServiceConfig config_;
  const uint64_t instance_;  // this process's id in heartbeats and register_ack (random, non-zero)
  std::unique_ptr<Sockets> sockets_;
  std::unique_ptr<KvEvents> kv_events_;  // declared before workers_: its observers outlive every Batcher
  SchedulerMetrics m_;
  scheduler::Intake intake_;
  WorkerRegistry workers_;
  RequestTable requests_;
  Failover failover_;
  StepDriver driver_;
  PrefixPins pins_;  // pinned prefixes (prefix_admin)
  LivenessConfig frontend_liveness_;
  std::map<std::string, PeerLiveness> frontends_;  // by routing id: every frontend heard from
  Clock::time_point last_stats_{};                  // of the last stats line (or start-up)
  double last_stats_tokens_ = 0;                     // generated_tokens then
  bool draining_ = false;           // stop seen: no new request; ends once requests_ is empty
  Clock::time_point drain_deadline_{};
  DrainSummary drain_;
  std::atomic<int64_t> heartbeat_;  // see heartbeat(); set at construction, then every iteration
};

}  // namespace tessera::scheduler_app
