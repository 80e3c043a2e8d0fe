#include "tessera/scheduler/router.h"

#include <algorithm>

#include "tessera/common/hash.h"
#include "tessera/common/routing.h"

namespace tessera::scheduler {

Result<Router> Router::create(RouterConfig config) {
  if (!(config.load_epsilon > 0.0)) return make_error(ErrorCode::kInvalidArgument, "router: load_epsilon must be > 0");
  if (config.routing_prefix_tokens < 1) {
    return make_error(ErrorCode::kInvalidArgument, "router: routing_prefix_tokens must be >= 1");
  }
  return Router(config);
}

Router::Router(RouterConfig config) : config_(config), ring_(HashRingConfig{.virtual_nodes = config.virtual_nodes}) {}

uint64_t Router::routing_key(const Request& r) const {
  if (!r.routing_key.empty()) {
    return routing_hash(r.routing_key, r.ns.tenant_salt.empty() ? 0 : fnv1a64(r.ns.tenant_salt));
  }
  if (r.preference) {
    KvNamespace user_ns{.model_fingerprint = r.ns.model_fingerprint, .tenant_salt = r.ns.tenant_salt, .user = r.ns.user};
    return mix64(user_ns.hash());
  }
  return prefix_routing_key(r.prompt, static_cast<size_t>(config_.routing_prefix_tokens), r.ns.hash());
}

Result<RouteDecision> Router::route(uint64_t key, std::span<const WorkerSnapshot> workers) const {
  if (ring_.empty()) return make_error(ErrorCode::kUnavailable, "router: no workers");
  if (workers.size() != ring_.size()) {
    return make_error(ErrorCode::kInvalidArgument, "router: snapshot lists " + std::to_string(workers.size()) +
                                                       " workers, the ring has " + std::to_string(ring_.size()));
  }
  int64_t total = 0;
  size_t eligible = 0;
  for (const auto& w : workers) {
    if (!ring_.contains(w.name)) {
      return make_error(ErrorCode::kInvalidArgument, "router: unknown worker '" + std::string(w.name) + "'");
    }
    if (w.load < 0) return make_error(ErrorCode::kInvalidArgument, "router: negative load for '" + std::string(w.name) + "'");
    if (!w.eligible) continue;
    total += w.load;
    ++eligible;
  }
  if (eligible == 0) return make_error(ErrorCode::kUnsupported, "router: no worker can serve this request");
  // The load bound is over the workers that can take the request.
  const int64_t cap = HashRing::capacity(total + 1, eligible, config_.load_epsilon);
  const WorkerSnapshot* best = nullptr;
  const WorkerSnapshot* first = nullptr;
  for (std::string_view name : ring_.preference_list(key)) {
    auto it = std::find_if(workers.begin(), workers.end(), [&](const WorkerSnapshot& w) { return w.name == name; });
    if (it == workers.end()) {
      return make_error(ErrorCode::kInvalidArgument, "router: snapshot misses worker '" + std::string(name) + "'");
    }
    if (!it->eligible || it->load >= cap) continue;
    if (first == nullptr) first = &*it;
    if (best == nullptr || it->cached_tokens > best->cached_tokens) best = &*it;
  }
  TS_CHECK(best != nullptr) << "no worker under capacity " << cap;  // the average is below cap
  RouteDecision d;
  d.worker = std::string(best->name);
  d.reason = best->cached_tokens > 0 && best != first ? RouteReason::kPrefix : RouteReason::kRing;
  d.cached_tokens = best->cached_tokens;
  d.capacity = cap;
  return d;
}

}  // namespace tessera::scheduler
