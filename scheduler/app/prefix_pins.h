// Pinned prefixes at the scheduler (docs/api.md "Pinned prefixes", docs/protocol.md
// "prefix_admin"): the frontend's prefix_admin messages become prewarm requests, pins, unpins
// and listings on this scheduler's workers, each answered by one prefix_report.
//
// Pin: the prefix goes through Intake like a request (same validation, same K/V namespace as a
// request with that tenant/cache_salt would get), then a one-token greedy request — a
// "prewarm", internal to the scheduler (RequestTable kInternal) — runs on each target worker:
// the routed worker (the one the prefix's routing key picks), every live worker ("*"), or the
// named ones. When a worker's prewarm ends, its batcher pins the prefix's whole pages
// (Batcher::pin); when every target is done, the report lists one entry per worker (an `error`
// where that worker could not pin it). A prefix already cached is still prewarmed (it costs one
// token of compute) so that a pin never races an eviction.
// Unpin and list are answered at once. Pins live in the workers' batchers: a worker that dies
// or restarts loses its pins (the listing shows what is pinned now).
//
// Ownership/threading: owned by the event loop, used only on its thread; borrows the intake,
// registry, request table and sockets, which outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "request_table.h"
#include "sockets.h"
#include "tessera/common/protocol.h"
#include "tessera/scheduler/intake.h"
#include "worker_registry.h"

namespace tessera::scheduler_app {

class PrefixPins {
 public:
  PrefixPins(std::string scheduler_name, const scheduler::Intake& intake, WorkerRegistry& workers, RequestTable& requests,
             Sockets& sockets)
      : name_(std::move(scheduler_name)), intake_(intake), workers_(workers), requests_(requests), sockets_(sockets) {}

  // One prefix_admin from `frontend`: answered now (unpin, list, or an error) or when its
  // prewarms end (pin).
  void on_admin(const std::string& frontend, const protocol::PrefixAdmin& a);
  // The prewarms that ended (RequestTable::take_internal_ends()).
  void on_internal_ends(const std::vector<InternalEnd>& ends);

 private:
  struct Job {
    std::string frontend;
    uint64_t client_id = 0;
    scheduler::KvNamespace ns;
    std::vector<int32_t> tokens;
    int pending = 0;
    protocol::PrefixReport report;
  };
  void pin(const std::string& frontend, const protocol::PrefixAdmin& a);
  void unpin(const std::string& frontend, const protocol::PrefixAdmin& a);
  void list(const std::string& frontend, const protocol::PrefixAdmin& a);
  void reply(const std::string& frontend, protocol::PrefixReport report);
  std::vector<std::string> targets(const std::vector<std::string>& named) const;  // "*" / [] = every live worker

  std::string name_;
  const scheduler::Intake& intake_;
  WorkerRegistry& workers_;
  RequestTable& requests_;
  Sockets& sockets_;
  std::unordered_map<uint64_t, Job> jobs_;         // by job id
  std::unordered_map<uint64_t, uint64_t> prewarms_;  // prewarm id (its TrackedRequest::client_id) -> job id
  uint64_t next_id_ = 1;                             // job and prewarm ids
};

}  // namespace tessera::scheduler_app
