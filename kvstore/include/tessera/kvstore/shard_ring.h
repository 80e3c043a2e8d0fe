// Client-side consistent hashing of Redis names over the L2 shards (docs/kvstore.md, "Several
// Redis shards").
//
// Rule: every shard, named by its address "host:port" as configured, owns kPointsPerShard points
// on a 64-bit ring, point i at xxh64(name + "#" + decimal(i)). A key (a Redis name,
// key.h redis_key()) lives on the shard owning the first point at or after xxh64(key) (wrapping
// to the smallest point); equal points are ordered by shard name. The order the shards are
// listed in does not matter, so every node listing the same set of addresses maps every key to
// the same shard. Adding or removing one of N shards moves only the keys whose owning point
// changes: about 1/N of them (kvstore_shard_ring_test measures it).
//
// Immutable after construction; thread-safe for concurrent readers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"

namespace tessera::kvstore {

class ShardRing {
 public:
  static constexpr int kPointsPerShard = 160;

  // Fails (kInvalidArgument, naming it) on an empty list, an empty name or a duplicate name.
  static Result<ShardRing> create(std::vector<std::string> shards);

  // Index into shards() of the shard that owns `key`.
  size_t owner(std::string_view key) const;
  const std::vector<std::string>& shards() const { return shards_; }
  size_t size() const { return shards_.size(); }

 private:
  struct Point {
    uint64_t hash;
    uint32_t shard;
  };
  ShardRing() = default;
  std::vector<std::string> shards_;
  std::vector<Point> points_;  // sorted by (hash, shard name)
};

}  // namespace tessera::kvstore
