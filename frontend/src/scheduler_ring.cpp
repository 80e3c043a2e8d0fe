#include "tessera/frontend/scheduler_ring.h"

#include "tessera/common/routing.h"

namespace tessera::frontend {

SchedulerRing::SchedulerRing(std::vector<std::string> endpoints) {
  for (auto& e : endpoints) (void)add(e);
}

size_t SchedulerRing::add(const std::string& endpoint) {
  auto it = index_of_.find(endpoint);
  if (it != index_of_.end()) return it->second;
  endpoints_.push_back(endpoint);
  index_of_.emplace(endpoint, endpoints_.size() - 1);
  return endpoints_.size() - 1;
}

void SchedulerRing::set_usable(size_t scheduler, bool usable) {
  const std::string& name = endpoints_.at(scheduler);
  const bool in = ring_.contains(name);
  if (usable && !in) (void)ring_.add(name);
  if (!usable && in) (void)ring_.remove(name);
}

std::optional<size_t> SchedulerRing::pick(std::string_view routing_key) const {
  auto owner = ring_.owner(routing_hash(routing_key));
  if (!owner.ok()) return std::nullopt;
  return index_of_.at(std::string(*owner));
}

std::optional<SchedulerRing::Choice> SchedulerRing::pick_bounded(std::string_view routing_key,
                                                                 const std::function<int64_t(size_t)>& load,
                                                                 double eps) const {
  const std::optional<size_t> owner = pick(routing_key);
  if (!owner || !(eps > 0.0)) return owner ? std::optional<Choice>(Choice{*owner, false}) : std::nullopt;
  auto chosen = ring_.owner_bounded(
      routing_hash(routing_key), [&](std::string_view name) { return load(index_of_.at(std::string(name))); }, eps);
  if (!chosen.ok()) return std::nullopt;
  const size_t i = index_of_.at(std::string(*chosen));
  return Choice{i, i != *owner};
}

}  // namespace tessera::frontend
