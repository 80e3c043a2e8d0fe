#include "service.h"

#include <random>
#include <string>

#include "event_loop.h"
#include "tessera/common/kv_digest.h"

namespace tessera::scheduler_app {
namespace {

// The secret of the K/V namespace names (kv_name_hash; docs/security.md "K/V reused by hash"):
// the scheduler's CURVE secret key — the same file on every scheduler of the cluster, which
// clients never see — or, under --insecure, random bytes (names then last one process, as the
// offload directory does). Before any batcher exists; a second Service in one process keeps the first's.
void set_kv_names_secret(const curve::Keys& keys) {
  std::string secret = keys.own().secret_key;
  if (!keys.secure() || secret.empty()) {
    std::random_device rd;
    secret.clear();
    for (int i = 0; i < 8; ++i) {
      const uint32_t x = rd();
      secret.append(reinterpret_cast<const char*>(&x), sizeof x);
    }
  }
  set_kv_name_secret(secret);
}

}  // namespace

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
  set_kv_names_secret(keys);
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
