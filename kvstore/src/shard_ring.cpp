#include "tessera/kvstore/shard_ring.h"

#include <algorithm>
#include <set>

#include "tessera/kvstore/blob.h"

namespace tessera::kvstore {

Result<ShardRing> ShardRing::create(std::vector<std::string> shards) {
  if (shards.empty()) return make_error(ErrorCode::kInvalidArgument, "no redis shard given");
  std::set<std::string> seen;
  for (const std::string& s : shards) {
    if (s.empty()) return make_error(ErrorCode::kInvalidArgument, "empty redis shard address");
    if (!seen.insert(s).second) {
      return make_error(ErrorCode::kInvalidArgument, "redis shard '" + s + "' is listed twice");
    }
  }
  ShardRing ring;
  ring.shards_ = std::move(shards);
  ring.points_.reserve(ring.shards_.size() * kPointsPerShard);
  for (size_t s = 0; s < ring.shards_.size(); ++s) {
    for (int i = 0; i < kPointsPerShard; ++i) {
      const std::string label = ring.shards_[s] + "#" + std::to_string(i);
      ring.points_.push_back({xxh64(label.data(), label.size()), static_cast<uint32_t>(s)});
    }
  }
  const auto& names = ring.shards_;
  std::sort(ring.points_.begin(), ring.points_.end(), [&](const Point& a, const Point& b) {
    return a.hash != b.hash ? a.hash < b.hash : names[a.shard] < names[b.shard];
  });
  return ring;
}

size_t ShardRing::owner(std::string_view key) const {
  if (shards_.size() == 1) return 0;
  const uint64_t h = xxh64(key.data(), key.size());
  auto it = std::lower_bound(points_.begin(), points_.end(), h, [](const Point& p, uint64_t v) { return p.hash < v; });
  if (it == points_.end()) it = points_.begin();
  return it->shard;
}

}  // namespace tessera::kvstore
