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
    std::string lost = why + "; the request was lost";
    if (r->original && r->requeues < kMaxRequeues && !workers_.empty()) {
      auto route = workers_.place(*r->original);
      if (route.ok()) {
        m_.requeued->inc();
        ++r->requeues;
        TS_LOG(kInfo) << "req=" << id << " client=" << r->client_id << " | re-queued from worker=" << r->worker
                      << " on worker=" << route->worker << " (" << why << ")";
        r->worker = route->worker;
        r->was_scheduled = false;
        r->fill.reset();
        continue;
      }
      lost = why + "; re-queueing it failed: " + route.error().message;
    } else if (r->original && r->requeues >= kMaxRequeues) {
      lost = why + "; it was already re-queued " + std::to_string(r->requeues) + " times";
    }
    m_.peer_dead->inc();
    requests_.fail(id, ErrorCode::kPeerDead, lost);
  }
}

}  // namespace tessera::scheduler_app
