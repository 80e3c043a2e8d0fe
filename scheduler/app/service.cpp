#include "service.h"

#include "event_loop.h"

namespace tessera::scheduler_app {

Service::Service(std::unique_ptr<EventLoop> loop) : loop_(std::move(loop)) {}
Service::~Service() = default;

Result<std::unique_ptr<Service>> Service::create(const ServiceConfig& config, metrics::Registry& registry) {
  using std::chrono::milliseconds;
  const milliseconds beat(config.heartbeat_ms);
  TS_TRY((LivenessConfig{.interval = beat, .dead_after = milliseconds(config.worker_dead_ms)}.validate(
      "--heartbeat-ms/--worker-dead-ms")));
  TS_TRY((LivenessConfig{.interval = beat, .dead_after = milliseconds(config.frontend_dead_ms)}.validate(
      "--heartbeat-ms/--frontend-dead-ms")));
  TS_ASSIGN_OR_RETURN(scheduler::Router router, scheduler::Router::create(config.router));
  TS_ASSIGN_OR_RETURN(curve::Keys keys, curve::Keys::load(config.curve, curve::Role::kScheduler));
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Sockets> sockets,
                      Sockets::bind(config.frontend_endpoint, config.worker_endpoint, keys, registry));
  TS_ASSIGN_OR_RETURN(std::unique_ptr<KvEvents> kv_events,
                      KvEvents::create({.endpoint = config.kv_events_endpoint, .snapshot_endpoint = config.kv_events_snapshot_endpoint},
                                       config.name, keys, registry));
  return std::unique_ptr<Service>(
      new Service(std::make_unique<EventLoop>(config, std::move(sockets), std::move(kv_events), std::move(router), registry)));
}

std::string Service::frontend_endpoint() const { return loop_->sockets().frontend_endpoint(); }
std::string Service::worker_endpoint() const { return loop_->sockets().worker_endpoint(); }

std::string Service::kv_events_endpoint() const { return loop_->kv_events() ? loop_->kv_events()->endpoint() : ""; }
std::string Service::kv_events_snapshot_endpoint() const {
  return loop_->kv_events() ? loop_->kv_events()->snapshot_endpoint() : "";
}

void Service::run(const std::atomic<bool>& stop) { loop_->run(stop); }
const std::atomic<int64_t>& Service::loop_heartbeat() const { return loop_->heartbeat(); }
DrainSummary Service::drain_summary() const { return loop_->drain_summary(); }

}  // namespace tessera::scheduler_app
