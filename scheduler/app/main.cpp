// tessera-scheduler: the scheduler core between frontends and workers (service.h). Every option
// is declared once below (flag, [scheduler] config key, environment variable, default, bounds).
#include <atomic>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "metrics_http.h"
#include "service.h"
#include "tessera/common/config.h"
#include "tessera/common/log.h"

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

void declare_options(tessera::config::Options& o) {
  using tessera::config::Type;
  o.add({.name = "name", .type = Type::kString, .default_value = "scheduler", .help = "name in logs and heartbeats",
         .env = "TESSERA_SCHEDULER_NAME"});
  o.add({.name = "frontend-endpoint", .type = Type::kString, .default_value = "tcp://127.0.0.1:8100",
         .help = "ROUTER bind for frontends (port * = any free port)", .env = "TESSERA_SCHEDULER_FRONTEND_ENDPOINT"});
  o.add({.name = "worker-endpoint", .type = Type::kString, .default_value = "tcp://127.0.0.1:8101",
         .help = "ROUTER bind for workers (port * = any free port)", .env = "TESSERA_SCHEDULER_WORKER_ENDPOINT"});
  o.add({.name = "metrics-host", .type = Type::kString, .default_value = "127.0.0.1",
         .help = "address of the Prometheus /metrics endpoint", .env = "TESSERA_SCHEDULER_METRICS_HOST"});
  o.add({.name = "metrics-port", .type = Type::kInt, .default_value = "8102",
         .help = "port of the Prometheus /metrics endpoint (0 = any free port, -1 = off)",
         .env = "TESSERA_SCHEDULER_METRICS_PORT", .min = -1, .max = 65535});
  o.add({.name = "heartbeat-ms", .type = Type::kInt, .default_value = "500",
         .help = "heartbeat interval the workers are told to use", .env = "TESSERA_SCHEDULER_HEARTBEAT_MS", .min = 10,
         .max = 60000});
  o.add({.name = "worker-dead-ms", .type = Type::kInt, .default_value = "3000",
         .help = "a worker silent this long is dead: its requests fail with peer_dead",
         .env = "TESSERA_WORKER_DEAD_MS", .min = 20, .max = 600000});
  o.add({.name = "frontend-dead-ms", .type = Type::kInt, .default_value = "5000",
         .help = "a frontend silent this long is gone: its requests are cancelled", .env = "TESSERA_FRONTEND_DEAD_MS",
         .min = 20, .max = 600000});
  o.add({.name = "max-running", .type = Type::kInt, .default_value = "256", .help = "running sequences per worker",
         .env = "TESSERA_MAX_RUNNING", .min = 1, .max = 1 << 20});
  o.add({.name = "max-waiting", .type = Type::kInt, .default_value = "4096",
         .help = "queued requests per worker; more get overloaded (HTTP 429)", .env = "TESSERA_MAX_WAITING", .min = 1,
         .max = 1 << 24});
  o.add({.name = "max-step-tokens", .type = Type::kInt, .default_value = "0",
         .help = "token budget per step (0 = the worker's max-batch-tokens)", .env = "TESSERA_MAX_STEP_TOKENS", .min = 0,
         .max = 1 << 20});
  o.add({.name = "max-context", .type = Type::kInt, .default_value = "0",
         .help = "positions per sequence (0 = the model's context length)", .env = "TESSERA_MAX_CONTEXT", .min = 0,
         .max = 1 << 24});
  o.add({.name = "prefix-cache", .type = Type::kBool, .default_value = "true",
         .help = "reuse K/V of shared prompt prefixes (false: every request computes its whole prompt)",
         .env = "TESSERA_PREFIX_CACHE"});
  o.add({.name = "audit", .type = Type::kBool, .default_value = "false",
         .help = "check every batcher invariant after each step (slow; tests)", .env = "TESSERA_SCHEDULER_AUDIT"});
  o.add({.name = "route-load-epsilon", .type = Type::kFloat, .default_value = "0.25",
         .help = "bounded-load slack: no worker takes more than (1 + eps) x the mean load", .env = "TESSERA_ROUTE_LOAD_EPSILON",
         .min = 0.001, .max = 100});
  o.add({.name = "log-level", .type = Type::kString, .default_value = "info", .help = "log level",
         .env = "TESSERA_LOG_LEVEL", .choices = {"debug", "info", "warn", "error", "off"}});
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  log::set_component("scheduler");
  config::Options options("tessera-scheduler", "scheduler");
  declare_options(options);
  if (Status st = options.parse(std::vector<std::string>(argv + 1, argv + argc)); !st.ok()) {
    std::fprintf(stderr, "tessera-scheduler: %s\n", st.error().message.c_str());
    return 2;
  }
  if (options.help_requested()) {
    std::printf("%s", options.help().c_str());
    return 0;
  }
  log::set_level(options.get("log-level"));
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);

  scheduler_app::ServiceConfig c;
  c.name = options.get("name");
  c.frontend_endpoint = options.get("frontend-endpoint");
  c.worker_endpoint = options.get("worker-endpoint");
  c.heartbeat_ms = static_cast<int>(options.get_int("heartbeat-ms"));
  c.worker_dead_ms = static_cast<int>(options.get_int("worker-dead-ms"));
  c.frontend_dead_ms = static_cast<int>(options.get_int("frontend-dead-ms"));
  c.max_running = static_cast<int32_t>(options.get_int("max-running"));
  c.max_waiting = static_cast<int32_t>(options.get_int("max-waiting"));
  c.max_step_tokens = static_cast<int32_t>(options.get_int("max-step-tokens"));
  c.max_context = static_cast<int32_t>(options.get_int("max-context"));
  c.prefix_cache = options.get_bool("prefix-cache");
  c.audit = options.get_bool("audit");
  c.router.load_epsilon = options.get_float("route-load-epsilon");

  metrics::Registry registry;
  auto service = scheduler_app::Service::create(c, registry);
  if (!service.ok()) {
    std::fprintf(stderr, "tessera-scheduler: %s\n", service.error().to_string().c_str());
    return 1;
  }
  std::unique_ptr<scheduler_app::MetricsServer> metrics_server;
  if (options.get_int("metrics-port") >= 0) {
    auto ms = scheduler_app::MetricsServer::start(options.get("metrics-host"), static_cast<int>(options.get_int("metrics-port")),
                                                  registry);
    if (!ms.ok()) {
      std::fprintf(stderr, "tessera-scheduler: %s\n", ms.error().to_string().c_str());
      return 1;
    }
    metrics_server = std::move(*ms);
  }
  // One machine-readable line for supervisors and tests (ports may have been chosen by the OS).
  std::printf("LISTENING frontends=%s workers=%s metrics=%d\n", (*service)->frontend_endpoint().c_str(),
              (*service)->worker_endpoint().c_str(), metrics_server ? metrics_server->port() : -1);
  std::fflush(stdout);
  TS_LOG(kInfo) << "frontends on " << (*service)->frontend_endpoint() << ", workers on " << (*service)->worker_endpoint()
                << ", prefix cache " << (c.prefix_cache ? "on" : "off");
  (*service)->run(g_stop);
  TS_LOG(kInfo) << "exiting";
  return 0;
}
