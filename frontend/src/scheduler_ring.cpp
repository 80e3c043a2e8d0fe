#include "tessera/frontend/scheduler_ring.h"

#include "tessera/common/routing.h"

namespace tessera::frontend {

SchedulerRing::SchedulerRing(std::vector<std::string> endpoints) : endpoints_(std::move(endpoints)) {
  for (size_t i = 0; i < endpoints_.size(); ++i) index_of_[endpoints_[i]] = i;
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

}  // namespace tessera::frontend
