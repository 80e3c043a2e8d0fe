// Ring choice: which scheduler serves a routing key. A consistent-hash ring (hash_ring.h) over
// the usable schedulers (listed, alive, with a live worker), keyed by routing_hash() of the
// request's routing key (common/routing.h: the one routing-key policy), with bounded loads —
// the rule a scheduler uses for its workers (docs/architecture.md "Several schedulers"):
//
// - load = the requests this frontend has in flight on each scheduler;
// - a key goes to the first scheduler clockwise from it whose load is below
//   capacity = ceil((1 + eps) * (L + 1) / n) (L = total load over the n usable schedulers;
//   eps = --scheduler-load-epsilon, default 0.25: no scheduler holds more than 1.25 x the mean,
//   rounded up); the key's owner while it is under the cap (prefix affinity: requests sharing a
//   system prompt share a routing key), else the next ones along the key's own clockwise order
//   (a hot prefix spreads over a few schedulers, always the same ones);
// - so a key's scheduler changes only when its owner is at the cap or the membership changes,
//   and a scheduler joining or leaving moves only its own share of keys (about 1/N; every
//   frontend that sees the same schedulers builds the same ring: nodes are named by endpoint).
//
// Ownership: owns its HashRing; schedulers are named by their endpoint and identified by the
// index the hub gives them (stable for the life of the process).
// Threading: not thread-safe; owned by the hub thread. Invariant: the ring holds exactly the
// schedulers last passed to set_usable(i, true) and not since set_usable(i, false).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/common/hash_ring.h"

namespace tessera::frontend {

class SchedulerRing {
 public:
  // `endpoints`: the schedulers known at start, by index (distinct names); more come with add().
  explicit SchedulerRing(std::vector<std::string> endpoints = {});

  // The index of `endpoint`, added (not usable yet) when new.
  size_t add(const std::string& endpoint);
  void set_usable(size_t scheduler, bool usable);
  size_t usable_count() const { return ring_.size(); }

  // The index of the scheduler owning `routing_key` (loads ignored); nullopt when none is usable.
  std::optional<size_t> pick(std::string_view routing_key) const;

  struct Choice {
    size_t scheduler = 0;
    bool spilled = false;  // the key's owner was at the cap: the next one clockwise took it
  };
  // The bounded-load choice above; `load(i)` = requests in flight on scheduler i (>= 0).
  // `eps` <= 0 turns the bound off (the owner, as pick()). nullopt when none is usable.
  std::optional<Choice> pick_bounded(std::string_view routing_key, const std::function<int64_t(size_t)>& load,
                                     double eps) const;

 private:
  std::vector<std::string> endpoints_;
  std::unordered_map<std::string, size_t> index_of_;
  HashRing ring_;
};

}  // namespace tessera::frontend
