// tessera-scheduler: the scheduler core between frontends and workers (service.h). Every option
// is declared once in scheduler_options.cpp (flag, [scheduler] config key, environment variable, bounds),
// bound to a config member whose initializer is its default.
#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/common/metrics_http.h"
#include "scheduler_options.h"
#include "service.h"
#include "tessera/common/config.h"
#include "tessera/common/log.h"
#include "tessera/common/signals.h"

namespace {


}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  log::set_component("scheduler");
  scheduler_app::SchedulerOptions config;
  config::Options options("tessera-scheduler", "scheduler");
  scheduler_app::declare_options(options, config);
  options.describe("The scheduler core between frontends and workers: one continuous batcher per worker");
  if (auto exit_code = config::parse_command_line(options, std::vector<std::string>(argv + 1, argv + argc)))
    return *exit_code;
  if (config.service.name != "scheduler") log::set_component("scheduler/" + config.service.name);
  signals::install();  // before any thread starts (signals.h); run() stops on stop_flag()

  const scheduler_app::ServiceConfig& c = config.service;

  metrics::Registry registry;
  auto service = scheduler_app::Service::create(c, registry);
  if (!service.ok()) {
    std::fprintf(stderr, "tessera-scheduler: %s\n", service.error().to_string().c_str());
    return 1;
  }
  std::unique_ptr<metrics_http::MetricsServer> metrics_server;
  if (config.metrics_port >= 0) {
    const std::atomic<int64_t>* heartbeat = &(*service)->loop_heartbeat();
    const int64_t stall_ms = config.health_stall_ms;
    auto ms = metrics_http::MetricsServer::start(
        config.metrics_host, config.metrics_port,
        metrics_http::Endpoints{.metrics = [&registry] { return registry.render(); },
                                .health = [heartbeat, stall_ms] { return metrics_http::loop_health(*heartbeat, stall_ms); }});
    if (!ms.ok()) {
      std::fprintf(stderr, "tessera-scheduler: %s\n", ms.error().to_string().c_str());
      return 1;
    }
    metrics_server = std::move(*ms);
  }
  // One machine-readable line for supervisors and tests (ports may have been chosen by the OS).
  std::string kv_events;
  if (!(*service)->kv_events_endpoint().empty())
    kv_events = " kv_events=" + (*service)->kv_events_endpoint() + " kv_snapshot=" + (*service)->kv_events_snapshot_endpoint();
  std::printf("LISTENING frontends=%s workers=%s metrics=%d%s\n", (*service)->frontend_endpoint().c_str(),
              (*service)->worker_endpoint().c_str(), metrics_server ? metrics_server->port() : -1, kv_events.c_str());
  std::fflush(stdout);
  TS_LOG(kInfo) << "frontends on " << (*service)->frontend_endpoint() << ", workers on " << (*service)->worker_endpoint()
                << ", prefix cache " << (c.prefix_cache ? "on" : "off");
  (*service)->run(signals::stop_flag());
  // The drain's outcome, machine-readable (docs/operations.md "Stopping a scheduler").
  const scheduler_app::DrainSummary d = (*service)->drain_summary();
  std::printf("DRAINED handed_back=%d refused=%d running=%d left=%d\n", d.handed_back, d.refused, d.running, d.left);
  std::fflush(stdout);
  TS_LOG(kInfo) << "exiting";
  return 0;
}
