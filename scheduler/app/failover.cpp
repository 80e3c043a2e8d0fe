#include "failover.h"

#include "tessera/common/log.h"

namespace tessera::scheduler_app {

void Failover::worker_dead(const std::string& name, const std::string& why) { requeue(remove_worker(name, why), why); }

std::vector<uint64_t> Failover::remove_worker(const std::string& name, const std::string& why) {
  if (workers_.find(name) == nullptr) return {};
  TS_LOG(kWarn) << "worker=" << name << " | dead: " << why;
  std::vector<uint64_t> ids = requests_.on_worker(name);
  workers_.remove(name);
  workers_.publish();
  return ids;
}

void Failover::requeue(const std::vector<uint64_t>& ids, const std::string& why) {
  for (uint64_t id : ids) {
    TrackedRequest* r = requests_.find(id);
    if (r == nullptr) continue;
    const bool streamed = !r->generated.empty();
    const int moves = streamed ? r->migrations : r->requeues;
    const int limit = streamed ? max_migrations_ : kMaxRequeues;
    std::string lost;
    if (!r->original) {
      lost = why + "; the request was lost";
    } else if (streamed && limit == 0) {
      lost = why + "; it had streamed tokens and migration is off (--max-migrations 0)";
    } else if (moves >= limit) {
      lost = why + "; it was already " + (streamed ? "migrated " : "re-queued ") + std::to_string(moves) + " times" +
             (streamed ? " (--max-migrations " + std::to_string(limit) + ")" : "");
    } else if (workers_.empty()) {
      lost = why + "; no live worker is left to " + (streamed ? "continue it on" : "run it") +
             " (the request was lost)";
    } else {
      scheduler::Request again = *r->original;
      again.generated = r->generated;
      auto route = workers_.place(std::move(again));
      if (route.ok()) {
        (streamed ? m_.migrated : m_.requeued)->inc();
        ++(streamed ? r->migrations : r->requeues);
        TS_LOG(kInfo) << "req=" << id << " client=" << r->client_id << " | "
                      << (streamed ? "migrated" : "re-queued") << " from worker=" << r->worker
                      << " to worker=" << route->worker << " after " << r->generated.size() << " tokens (" << why << ")";
        r->worker = route->worker;
        r->fill.reset();
        if (!streamed) r->was_scheduled = false;
        continue;
      }
      lost = why + "; " + (streamed ? "migrating" : "re-queueing") + " it failed: " + route.error().message;
    }
    m_.peer_dead->inc();
    requests_.fail(id, ErrorCode::kPeerDead, lost);
  }
}

}  // namespace tessera::scheduler_app
