// L2 spread over several Redis instances ("shards") by client-side consistent hashing
// (shard_ring.h). One RedisL2 (redis_l2.h) per shard, each with its own pool, health thread
// (reconnect with backoff) and event subscriber; a single shard behaves exactly like RedisL2.
//
// Routing: put/get/exists/remove go to the shard owning the key's Redis name (ShardRing). While
// that shard is down they fail fast with kUnavailable (the Store answers gets from L1 or as a
// miss; the other shards keep working). A key is only ever read from its own shard, and every
// value is MAC-checked, so a lost or returning shard can make a key miss but never serve another
// key's bytes. remove_user and clear act on every shard (each shard keeps its own user index);
// when one shard is down they do the others and then fail with kUnavailable naming it.
//
// Events: every node subscribes to every shard; publish_event() publishes on every shard that
// is up, so an invalidation reaches every node as long as one shard is up. A node may receive an
// event once per shard: handlers must be idempotent (the Store's are: they erase).
//
// Thread-safety: all methods may be called concurrently. The shard list is fixed at creation.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/kvstore/redis_l2.h"
#include "tessera/kvstore/shard_ring.h"

namespace tessera::kvstore {

struct ShardStatus {
  std::string address;  // "host:port", the shard's name on the ring
  bool up = false;
  L2Counters counters;
  InflightBudget::Snapshot get_many_budget;  // its get_many in-flight budget and estimates
};

class ShardedL2 {
 public:
  // Fails on bad configuration (no shard, a duplicate address, an empty secret); unreachable
  // shards are not an error. `on_event` runs on the subscriber threads (one per shard);
  // `on_back(i)` on shard i's health thread each time it is back (both may be empty).
  static Result<std::unique_ptr<ShardedL2>> create(const std::vector<RedisConfig>& shards, std::string secret,
                                                   std::function<void(std::string_view)> on_event = {},
                                                   std::function<void(size_t)> on_back = {});
  ShardedL2(const ShardedL2&) = delete;
  ShardedL2& operator=(const ShardedL2&) = delete;

  Status put(const BlobKey& key, std::string_view blob, uint32_t ttl_s = 0);
  Result<std::optional<std::string>> get(const BlobKey& key);
  // RedisL2::get_many over the shards: one pipelined round trip per shard that owns some of the keys, answers
  // in the keys' order; a shard that is down answers its keys with kUnavailable.
  std::vector<Result<std::optional<std::string>>> get_many(std::span<const BlobKey> keys);
  Result<bool> exists(const BlobKey& key);
  Result<bool> remove(const BlobKey& key);
  Result<uint64_t> remove_user(const std::string& user);  // keys deleted over every shard
  Result<uint64_t> clear();
  // Published on every shard that is up; fails only when none took it.
  Status publish_event(std::string_view event);

  size_t owner(const BlobKey& key) const;  // index of the shard holding key
  bool up() const;      // every shard answers
  bool any_up() const;  // at least one does
  size_t shard_count() const { return shards_.size(); }
  RedisL2& shard(size_t i) { return *shards_[i]; }
  std::vector<ShardStatus> shard_status() const;
  L2Counters counters() const;  // summed over the shards
  const KeySigner& signer() const { return shards_.front()->signer(); }
  const ShardRing& ring() const { return ring_; }

 private:
  explicit ShardedL2(ShardRing ring) : ring_(std::move(ring)) {}
  RedisL2& route(const BlobKey& key) { return *shards_[owner(key)]; }

  const ShardRing ring_;
  std::vector<std::unique_ptr<RedisL2>> shards_;  // in ring_.shards() order; fixed after create()
};

}  // namespace tessera::kvstore
