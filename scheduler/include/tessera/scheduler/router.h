// Routing a request to one of a scheduler's workers: consistent hashing with bounded loads
// (common/hash_ring.h), scored by prefix match.
//
// Policy, for a request with routing key k over n workers with total load L (requests waiting or
// running), eps = load_epsilon:
//   1. capacity c = ceil((1 + eps) * (L + 1) / n) (Mirrokni–Thorup–Zadimoghaddam); a worker is
//      eligible while its load < c, so no worker ever goes above c;
//   2. among eligible workers, the one whose radix index holds the most tokens of the request's
//      prompt wins (cached_tokens, from Batcher::cached_prefix_tokens);
//   3. ties, including "nobody holds anything", go to the first eligible worker clockwise from k
//      on the ring, so a prefix keeps landing on the same worker until that worker is full, and
//      its overflow spills to the next worker on the ring (which then warms up for it) instead of
//      piling onto the warmest worker.
// The routing key (routing_key(), the one policy of common/routing.h): a request carrying the
// wire field `routing_key` (Request::routing_key, which the frontend fills with
// routing_key_for(): the client's key, else "user:<user>", else "prefix:<hash>") is placed at
// routing_hash(routing_key, seed), seed = fnv1a64(tenant salt), 0 without a salt — so tenants
// (and, with the prefix cache off, every request) get ring positions of their own, and the
// scheduler never recomputes a key the frontend already chose. Only when the field is empty
// (clients older than the field) does the Router derive a key itself: the hash of the first
// routing_prefix_tokens prompt tokens seeded with the namespace hash, or, for a preference-
// injected request, the hash of (model, tenant, user), so a user's requests meet their
// preference K/V on the same worker.
//
// Use, with one Batcher per worker:
//   std::vector<WorkerSnapshot> snap;
//   for (auto& [name, b] : batchers) snap.push_back({name, b->load(), b->cached_prefix_tokens(req)});
//   auto decision = router.route(router.routing_key(req), snap);
//
// Thread-safety: none; a const Router may be read concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tessera/common/hash_ring.h"
#include "tessera/common/result.h"
#include "tessera/scheduler/request.h"

namespace tessera::scheduler {

struct RouterConfig {
  int32_t virtual_nodes = 160;
  double load_epsilon = 0.25;          // > 0
  int32_t routing_prefix_tokens = 64;  // K, >= 1
};

struct WorkerSnapshot {
  std::string_view name;
  int64_t load = 0;           // requests waiting + running (Batcher::load())
  int32_t cached_tokens = 0;  // prompt tokens its index holds for this request
  bool eligible = true;       // false: it lacks a capability the request needs; never chosen
};

enum class RouteReason : uint8_t { kRing, kPrefix };

struct RouteDecision {
  std::string worker;
  RouteReason reason = RouteReason::kRing;  // kPrefix when a cached prefix decided
  int32_t cached_tokens = 0;
  int64_t capacity = 0;
};

class Router {
 public:
  // kInvalidArgument for load_epsilon <= 0 or routing_prefix_tokens < 1.
  static Result<Router> create(RouterConfig config);

  Status add_worker(std::string_view name) { return ring_.add(name); }
  Status remove_worker(std::string_view name) { return ring_.remove(name); }
  const HashRing& ring() const { return ring_; }
  const RouterConfig& config() const { return config_; }

  // The request's ring position (see above).
  uint64_t routing_key(const Request& request) const;

  // `workers` must list every worker of the ring exactly once, in any order (kInvalidArgument
  // otherwise); kUnavailable with no workers. Only `eligible` workers are chosen, and the load
  // bound is taken over them (capacity(total eligible load + 1, eligible count, eps));
  // kUnsupported when none is eligible.
  Result<RouteDecision> route(uint64_t key, std::span<const WorkerSnapshot> workers) const;

 private:
  explicit Router(RouterConfig config);
  RouterConfig config_;
  HashRing ring_;
};

}  // namespace tessera::scheduler
