// Consistent-hash ring with virtual nodes and bounded loads.
//
// Used twice: the frontend picks a scheduler, and a scheduler picks a worker (scheduler/router.h
// adds prefix-match scoring on top). Each node owns `virtual_nodes` points on a 64-bit ring at
// positions derived from its name only, so adding or removing one of N nodes moves only about
// 1/N of the keys (those owned by that node), and every process that knows the same node names
// builds the same ring.
//
// Bounded loads follow Mirrokni, Thorup and Zadimoghaddam, "Consistent Hashing with Bounded
// Loads" (SODA 2018): with m balls (the one being placed included) over n nodes, a node accepts
// a ball only while its load is below capacity(m, n, eps) = ceil((1 + eps) * m / n); a key goes
// to the first node clockwise from it that accepts. No node ever exceeds the capacity, and a
// node's keys leave it only when it is full.
//
// Thread-safety: none; a const HashRing may be read from several threads at once. string_views
// returned by it point into the ring and stay valid until the next add() or remove().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"

namespace tessera {

struct HashRingConfig {
  int32_t virtual_nodes = 160;  // points per node; more = smoother shares, larger ring
};

class HashRing {
 public:
  // virtual_nodes < 1 is clamped to 1.
  explicit HashRing(HashRingConfig config = {});

  // kInvalidArgument when the name is empty or already present (remove: absent).
  Status add(std::string_view node);
  Status remove(std::string_view node);
  bool contains(std::string_view node) const;
  size_t size() const { return names_.size(); }
  bool empty() const { return names_.empty(); }
  // Node names in the order they were added.
  const std::vector<std::string>& nodes() const { return names_; }

  // The node owning `key`: the first point clockwise from key. kUnavailable when the ring is empty.
  Result<std::string_view> owner(uint64_t key) const;
  // Distinct nodes in clockwise order from `key` (the owner first), at most `max` of them.
  std::vector<std::string_view> preference_list(uint64_t key, size_t max = SIZE_MAX) const;

  // MTZ bounded-load placement: the first node in preference_list(key) with
  // load(node) < capacity(total + 1, size(), eps), where total is the sum of load() over all nodes
  // (the ball being placed is counted). kUnavailable when the ring is empty; kInvalidArgument
  // when eps <= 0 or a load is negative.
  Result<std::string_view> owner_bounded(uint64_t key, const std::function<int64_t(std::string_view)>& load,
                                         double eps) const;

  // ceil((1 + eps) * total / num_nodes), at least 1; 0 when num_nodes == 0.
  static int64_t capacity(int64_t total, size_t num_nodes, double eps);

 private:
  struct Point {
    uint64_t pos;
    uint32_t node;  // index into names_
  };
  size_t first_point_at_or_after(uint64_t key) const;
  void rebuild_points();

  HashRingConfig config_;
  std::vector<std::string> names_;
  std::vector<Point> points_;  // sorted by (pos, name)
};

}  // namespace tessera
