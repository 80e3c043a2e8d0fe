#include "tessera/common/hash_ring.h"

#include <algorithm>
#include <cmath>

#include "tessera/common/hash.h"

namespace tessera {

HashRing::HashRing(HashRingConfig config) : config_(config) {
  if (config_.virtual_nodes < 1) config_.virtual_nodes = 1;
}

bool HashRing::contains(std::string_view node) const {
  return std::find(names_.begin(), names_.end(), node) != names_.end();
}

Status HashRing::add(std::string_view node) {
  if (node.empty()) return make_error(ErrorCode::kInvalidArgument, "hash ring: node name is empty");
  if (contains(node)) {
    return make_error(ErrorCode::kInvalidArgument, "hash ring: node '" + std::string(node) + "' is already present");
  }
  names_.emplace_back(node);
  rebuild_points();
  return ok_status();
}

Status HashRing::remove(std::string_view node) {
  auto it = std::find(names_.begin(), names_.end(), node);
  if (it == names_.end()) {
    return make_error(ErrorCode::kInvalidArgument, "hash ring: node '" + std::string(node) + "' is not present");
  }
  names_.erase(it);
  rebuild_points();
  return ok_status();
}

// Positions depend only on the node's name and the point's number, so a node's points are the
// same in every ring that contains it.
void HashRing::rebuild_points() {
  points_.clear();
  points_.reserve(names_.size() * static_cast<size_t>(config_.virtual_nodes));
  for (uint32_t n = 0; n < names_.size(); ++n) {
    const uint64_t base = fnv1a64(names_[n]);
    for (int32_t v = 0; v < config_.virtual_nodes; ++v) {
      points_.push_back(Point{hash_combine(base, static_cast<uint64_t>(v)), n});
    }
  }
  std::sort(points_.begin(), points_.end(), [&](const Point& a, const Point& b) {
    if (a.pos != b.pos) return a.pos < b.pos;
    return names_[a.node] < names_[b.node];  // deterministic on (astronomically rare) ties
  });
}

size_t HashRing::first_point_at_or_after(uint64_t key) const {
  auto it = std::lower_bound(points_.begin(), points_.end(), key,
                             [](const Point& p, uint64_t k) { return p.pos < k; });
  return it == points_.end() ? 0 : static_cast<size_t>(it - points_.begin());
}

Result<std::string_view> HashRing::owner(uint64_t key) const {
  if (points_.empty()) return make_error(ErrorCode::kUnavailable, "hash ring: no nodes");
  return std::string_view(names_[points_[first_point_at_or_after(key)].node]);
}

std::vector<std::string_view> HashRing::preference_list(uint64_t key, size_t max) const {
  std::vector<std::string_view> out;
  if (points_.empty() || max == 0) return out;
  const size_t want = std::min(max, names_.size());
  std::vector<bool> seen(names_.size(), false);
  const size_t start = first_point_at_or_after(key);
  for (size_t i = 0; i < points_.size() && out.size() < want; ++i) {
    const uint32_t n = points_[(start + i) % points_.size()].node;
    if (!seen[n]) {
      seen[n] = true;
      out.emplace_back(names_[n]);
    }
  }
  return out;
}

int64_t HashRing::capacity(int64_t total, size_t num_nodes, double eps) {
  if (num_nodes == 0) return 0;
  const double c = std::ceil((1.0 + eps) * static_cast<double>(total) / static_cast<double>(num_nodes));
  return std::max<int64_t>(1, static_cast<int64_t>(c));
}

Result<std::string_view> HashRing::owner_bounded(uint64_t key, const std::function<int64_t(std::string_view)>& load,
                                                 double eps) const {
  if (points_.empty()) return make_error(ErrorCode::kUnavailable, "hash ring: no nodes");
  if (!(eps > 0.0)) return make_error(ErrorCode::kInvalidArgument, "hash ring: eps must be > 0");
  std::vector<int64_t> loads(names_.size());
  int64_t total = 0;
  for (size_t n = 0; n < names_.size(); ++n) {
    loads[n] = load(names_[n]);
    if (loads[n] < 0) {
      return make_error(ErrorCode::kInvalidArgument, "hash ring: negative load for node '" + names_[n] + "'");
    }
    total += loads[n];
  }
  const int64_t cap = capacity(total + 1, names_.size(), eps);
  const size_t start = first_point_at_or_after(key);
  for (size_t i = 0; i < points_.size(); ++i) {
    const uint32_t n = points_[(start + i) % points_.size()].node;
    if (loads[n] < cap) return std::string_view(names_[n]);
  }
  // Unreachable: the average load is below the capacity, so some node accepts.
  TS_CHECK(false) << "bounded-load ring found no node under capacity " << cap;
  return make_error(ErrorCode::kInternal, "unreachable");
}

}  // namespace tessera
