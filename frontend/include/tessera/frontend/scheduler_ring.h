// Ring choice: which scheduler serves a routing key. A consistent-hash ring (hash_ring.h) over
// the usable schedulers (alive, with a live worker), keyed by routing_hash() of the request's
// routing key (common/routing.h: the one routing-key policy), so a scheduler joining or leaving
// moves only its own share of keys, and every frontend configured with the same schedulers
// picks the same one for a key.
//
// Ownership: owns its HashRing; schedulers are named by their index in the hub's links.
// Threading: not thread-safe; owned by the hub thread. Invariant: the ring holds exactly the
// schedulers last passed to set_usable(i, true) and not since set_usable(i, false).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/common/hash_ring.h"

namespace tessera::frontend {

class SchedulerRing {
 public:
  // `endpoints`: every configured scheduler, by index (distinct names).
  explicit SchedulerRing(std::vector<std::string> endpoints);

  void set_usable(size_t scheduler, bool usable);
  // The index of the scheduler owning `routing_key`; nullopt when none is usable.
  std::optional<size_t> pick(std::string_view routing_key) const;

 private:
  std::vector<std::string> endpoints_;
  std::unordered_map<std::string, size_t> index_of_;
  HashRing ring_;
};

}  // namespace tessera::frontend
