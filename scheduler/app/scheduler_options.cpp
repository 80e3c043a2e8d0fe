// tessera-scheduler's options, each bound to its SchedulerOptions member (scheduler_options.h).
#include "scheduler_options.h"

namespace tessera::scheduler_app {

void declare_options(config::Options& o, SchedulerOptions& c) {
  o.add(c.service.name, {.name = "name", .help = "name in logs and heartbeats", .env = "TESSERA_SCHEDULER_NAME"});
  o.add(c.service.frontend_endpoint, {.name = "frontend-endpoint",
                                      .help = "ROUTER bind for frontends (port * = any free port)",
                                      .env = "TESSERA_SCHEDULER_FRONTEND_ENDPOINT"});
  o.add(c.service.worker_endpoint, {.name = "worker-endpoint",
                                    .help = "ROUTER bind for workers (port * = any free port)",
                                    .env = "TESSERA_SCHEDULER_WORKER_ENDPOINT"});
  o.add(c.metrics_host, {.name = "metrics-host",
                         .help = "address of the Prometheus /metrics endpoint (IPv4 or IPv6; :: = every address, both)",
                         .env = "TESSERA_SCHEDULER_METRICS_HOST"});
  o.add(c.metrics_port, {.name = "metrics-port",
                         .help = "port of the Prometheus /metrics endpoint (0 = any free port, -1 = off)",
                         .env = "TESSERA_SCHEDULER_METRICS_PORT", .min = -1, .max = 65535});
  o.add(c.health_stall_ms, {.name = "health-stall-ms",
                            .help = "/health answers 503 when the event loop has not completed an iteration for this "
                                    "long (it iterates at least every 50 ms when healthy)",
                            .env = "TESSERA_SCHEDULER_HEALTH_STALL_MS", .min = 100, .max = 3600000});
  o.add(c.service.heartbeat_ms, {.name = "heartbeat-ms", .help = "heartbeat interval the workers are told to use",
                                 .env = "TESSERA_SCHEDULER_HEARTBEAT_MS", .min = 10, .max = 60000});
  o.add(c.service.worker_dead_ms, {.name = "worker-dead-ms",
                                   .help = "a worker silent this long is dead: its requests move to another worker (re-queued, or migrated mid-stream)",
                                   .env = "TESSERA_WORKER_DEAD_MS", .min = 20, .max = 600000});
  o.add(c.service.max_migrations, {.name = "max-migrations",
                                   .help = "times a request that has streamed tokens is moved off a dead worker, resuming "
                                           "after the tokens sent (0 = never: it ends with peer_dead)",
                                   .env = "TESSERA_MAX_MIGRATIONS", .min = 0, .max = 100});
  o.add(c.service.frontend_dead_ms, {.name = "frontend-dead-ms",
                                     .help = "a frontend silent this long is gone: its requests are cancelled",
                                     .env = "TESSERA_FRONTEND_DEAD_MS", .min = 20, .max = 600000});
  o.add(c.service.max_running, {.name = "max-running", .help = "running sequences per worker",
                                .env = "TESSERA_MAX_RUNNING", .min = 1, .max = 1 << 20});
  o.add(c.service.max_waiting, {.name = "max-waiting",
                                .help = "queued requests per worker; more get overloaded (HTTP 429)",
                                .env = "TESSERA_MAX_WAITING", .min = 1, .max = 1 << 24});
  o.add(c.service.max_pinned_pages, {.name = "max-pinned-pages",
                                     .help = "K/V pages per worker that pinned prefixes may hold (0 = half the worker's pool); "
                                             "docs/api.md \"Pinned prefixes\"",
                                     .env = "TESSERA_MAX_PINNED_PAGES", .min = 0, .max = 1 << 30});
  o.add(c.service.kv_offload.min_reload_pages,
        {.name = "kv-offload-min-pages",
         .help = "K/V offload (workers with --kv-offload): reload a prefix continuation from the kvstore only when "
                 "at least this many pages of it are there (docs/kv.md)",
         .env = "TESSERA_KV_OFFLOAD_MIN_PAGES", .min = 1, .max = 1 << 20});
  o.add(c.service.kv_offload.max_entries,
        {.name = "kv-offload-max-entries",
         .help = "K/V offload: block hashes the scheduler remembers as held by the kvstore (least recently used out)",
         .env = "TESSERA_KV_OFFLOAD_MAX_ENTRIES", .min = 1, .max = int64_t{1} << 32});
  o.add(c.service.max_step_tokens, {.name = "max-step-tokens",
                                    .help = "token budget per step (0 = the worker's max-batch-tokens)",
                                    .env = "TESSERA_MAX_STEP_TOKENS", .min = 0, .max = 1 << 20});
  o.add(c.service.max_context, {.name = "max-context", .help = "positions per sequence (0 = the model's context "
                                                               "length)",
                                .env = "TESSERA_MAX_CONTEXT", .min = 0, .max = 1 << 24});
  o.add(c.service.prefix_cache, {.name = "prefix-cache",
                                 .help = "reuse K/V of shared prompt prefixes (false: every request computes its "
                                         "whole prompt)",
                                 .env = "TESSERA_PREFIX_CACHE"});
  o.add(c.service.drain_timeout_s, {.name = "drain-timeout-s",
                                    .help = "on SIGTERM the scheduler drains: the frontends are told at once and route new "
                                            "requests elsewhere, its queued requests go back to them (peer_dead, submitted "
                                            "again), the running ones finish; after this long it exits anyway (what is left "
                                            "ends with peer_dead; 0 = at once)",
                                    .env = "TESSERA_SCHEDULER_DRAIN_TIMEOUT_S", .min = 0, .max = 86400});
  o.add(c.service.stats_interval_s, {.name = "stats-interval-s",
                                     .help = "seconds between two stats log lines (running, waiting, pages, hit rate, "
                                             "tokens/s; 0 = none)",
                                     .env = "TESSERA_SCHEDULER_STATS_INTERVAL_S", .min = 0, .max = 86400});
  o.add(c.service.kv_events_endpoint, {.name = "kv-events-endpoint",
                                       .help = "ZeroMQ PUB bind for K/V events: pages stored into / evicted from each worker's "
                                               "radix index, preference fills (\"\" = off; port * = any free port)",
                                       .env = "TESSERA_KV_EVENTS_ENDPOINT"});
  o.add(c.service.kv_events_snapshot_endpoint,
        {.name = "kv-events-snapshot-endpoint",
         .help = "ZeroMQ ROUTER bind answering kv_snapshot with every worker's whole index and its sequence number "
                 "(required with --kv-events-endpoint)",
         .env = "TESSERA_KV_EVENTS_SNAPSHOT_ENDPOINT"});
  o.add(c.service.audit, {.name = "audit", .help = "check every batcher invariant after each step (slow; tests)",
                          .env = "TESSERA_SCHEDULER_AUDIT"});
  o.add(c.service.router.load_epsilon, {.name = "route-load-epsilon",
                                        .help = "bounded-load slack: no worker takes more than (1 + eps) x the mean "
                                                "load",
                                        .env = "TESSERA_ROUTE_LOAD_EPSILON", .min = 0.001, .max = 100});
  curve::declare_options(o, c.service.curve, curve::Role::kScheduler);
}

}  // namespace tessera::scheduler_app
