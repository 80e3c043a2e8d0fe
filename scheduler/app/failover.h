// Failover: what happens to the requests of a worker that is gone (silent past its dead_after,
// said `shutdown`, or registered again after losing its link and with it all request state).
//
// Rule (docs/scheduler.md "Failover and migration"): an orphaned request is routed again over
// the live workers (TrackedRequest::original):
// - one that has not streamed a token is queued as if it had just arrived (a re-queue; at most
//   kMaxRequeues times: a request that kills its workers must not kill them all);
// - one that has streamed is migrated: queued with Request::generated = the tokens the client
//   already has, so the new worker re-prefills prompt + those tokens and the stream goes on
//   with the next token (greedy: exactly the uninterrupted output; seeded sampling: the worker
//   advances the RNG past them). At most max_migrations (default kMaxMigrations) times.
// A request that cannot be placed (no worker left, queues full, moved too often) ends with an
// `error` kPeerDead whose message says why.
//
// Ownership/threading: borrows the registry, the table and the metrics of the event loop; used
// only by its thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "request_table.h"
#include "scheduler_metrics.h"
#include "worker_registry.h"

namespace tessera::scheduler_app {

class Failover {
 public:
  static constexpr int kMaxRequeues = 3;
  static constexpr int kMaxMigrations = 2;

  // max_migrations: the bound on migrations per request (--max-migrations; 0 = streamed
  // requests end with kPeerDead, as before migration existed).
  Failover(WorkerRegistry& workers, RequestTable& requests, SchedulerMetrics& m, int max_migrations = kMaxMigrations)
      : workers_(workers), requests_(requests), m_(m), max_migrations_(max_migrations) {}

  // The worker is gone: forgets it (remove_worker), then requeue()s its requests.
  void worker_dead(const std::string& name, const std::string& why);
  // Forgets the worker (its Batcher, ring place and gauges) and returns the ids of the requests
  // it held, which still exist and point at it: the caller must requeue() them.
  std::vector<uint64_t> remove_worker(const std::string& name, const std::string& why);
  // Re-queues, migrates or fails (kPeerDead) each orphaned request, per the rule above.
  void requeue(const std::vector<uint64_t>& ids, const std::string& why);

 private:
  WorkerRegistry& workers_;
  RequestTable& requests_;
  SchedulerMetrics& m_;
  int max_migrations_;
};

}  // namespace tessera::scheduler_app
