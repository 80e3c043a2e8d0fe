// The kvstore's storage logic: L1 (l1_cache.h) in front of an optional Redis L2 (redis_l2.h),
// with metrics. Independent of the transport (the ZeroMQ service in server.h uses it).
//
// Semantics:
// - put: the blob is checked (header and checksum: blob.h verify_blob; its fingerprint must equal
//   the key's) and stored in L1 (unless larger than the L1 quotas) and in L2 (when configured and
//   up). It fails only when it was stored nowhere. L1 entries expire with the same TTL as L2.
// - get: L1, then L2; an L2 hit is promoted to L1. A value failing its MAC is a miss, counted in
//   tessera_kvstore_mac_failures_total. Redis down = L1 only (never an error).
// - remove / invalidate_user / clear act on every tier; when Redis is configured but down they
//   clear L1 and then fail with kUnavailable saying that L2 was not cleared (retry later).
//   invalidate_user and clear also publish an event on Redis so every other kvstore node drops
//   its L1 copies (promoted from L2) of that user / of everything (redis_l2.h); so do put and
//   remove for their one key (another node's L1 copy is stale after either), also when the
//   key's own shard is down (the event goes over every shard that is up). Event payloads:
//   "<node id>|user:<user index key>", "<node id>|clear", "<node id>|key:<user index key>|<redis name>[|unsynced]".
// - L2 may be spread over several Redis shards (sharded_l2.h): a key lives on one shard; a
//   shard being down makes its keys L1-only (hits from L1, else misses), the others work.
// - write-back: each time Redis is back (reachable again after being down, or restarted between
//   two health checks: redis_l2.h), every live L1 entry that Redis lacks is written back to it
//   with the entry's remaining TTL (an entry Redis has is never overwritten). So a Redis that
//   lost its data (no persistence, or a flush) gets this node's preferences again and other
//   nodes — or this one after a restart — find them. Counted in tessera_kvstore_l2_write_backs_total.
//   Except for keys whose last put or remove through this node did not reach their shard (it was
//   down): Redis may still hold the value from before (a shard cut off, not restarted), which is
//   stale now, so for those the write-back overwrites it with this node's L1 entry, or deletes it
//   when L1 has none (removed, or evicted meanwhile), and tells the other nodes (key event); a
//   key event from another node for such a key first drops it from this node's list (that node
//   wrote it later). The key event of such a put/remove says so ("...|unsynced"): every other node
//   then answers gets of that key from L1 or as misses, never from L2, until a later key event of
//   it (the write-back's, or another put) or a year (the longest TTL a put may give, so the old
//   value has expired by then) — so no node reads the stale value in the window between the
//   shard's return and this node's write-back. The writer itself never reads L2 for a key on its
//   own list either (its L1 copy may be evicted before the sync). A put/remove of a key and its
//   sync are serialized (a lock stripe per key), so a sync never overwrites a newer put made
//   through this node while the shard came back.
//   Not guaranteed (the lists live in memory and events are fire-and-forget pub/sub): a node
//   restarted while a shard is down forgets its unsynced keys (never synced; other nodes distrust
//   them, misses) and a restarted node forgets which keys it distrusts (it may read the old value
//   until the writer's sync); with a single shard, or every shard down, no event gets out, so
//   other nodes keep their L1 copies and, after the shard's return, read its old value until the
//   writer's sync (never, if the writer is gone). Two nodes writing the same key within the
//   sync's window: the one reaching Redis last wins (no version is stored).
//
// Thread-safety: all methods may be called concurrently. get_l1 never blocks on the network;
// the other methods may wait on Redis (bounded by its timeouts), so the service calls them from
// worker threads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/kvstore/key.h"
#include "tessera/kvstore/l1_cache.h"
#include "tessera/kvstore/redis_l2.h"
#include "tessera/kvstore/sharded_l2.h"
#include "tessera/kvstore/types.h"

namespace tessera::metrics {
class Registry;
}  // namespace tessera::metrics

namespace tessera::kvstore {

struct StoreConfig {
  L1Config l1;
  std::optional<RedisConfig> redis;  // nullopt = L1 only (unless redis_shards is given)
  std::vector<RedisConfig> redis_shards;  // further L2 shards: L2 = redis (if set) + these
  std::string secret;                // HMAC secret; required when redis is set
  uint64_t max_blob_bytes = uint64_t{256} << 20;
  uint32_t default_ttl_s = 86400;    // used when a put gives none
};

struct GetResult {
  Blob blob;  // nullptr on a miss
  Tier tier = Tier::kNone;
};

struct PutResult {
  bool l1 = false;
  bool l2 = false;
  std::string note;  // why a tier was skipped ("" when stored everywhere configured)
};


class Store {
 public:
  static Result<std::unique_ptr<Store>> create(StoreConfig config);
  ~Store();

  GetResult get_l1(const BlobKey& key);
  Result<GetResult> get(const BlobKey& key);
  // get() of several keys (the service's get_many), answered in order as get() answers each, but
  // with the L1 misses of each window of kGetManyWindow keys asked of Redis pipelined, per shard
  // (ShardedL2::get_many), instead of one round trip per key. The answer is a prefix of `keys`, at least one
  // entry: it stops before a hit would bring the blob bytes past max_bytes (the caller asks again
  // for the rest). Windows shrink to what the rest of max_bytes holds at the largest blob seen so
  // far (the first window is one key), so a call reads about one blob past the cut, not a window
  // of them; what it read past the cut is promoted to L1 but not counted (hits, misses, get
  // bytes count the answer's entries only, as get() would count each). Fails only on a bad key.
  static constexpr size_t kGetManyWindow = 64;
  Result<std::vector<GetResult>> get_many(std::span<const BlobKey> keys, size_t max_bytes = SIZE_MAX);
  Result<PutResult> put(const BlobKey& key, std::string blob, uint32_t ttl_s = 0);
  Result<Tier> exists(const BlobKey& key);
  Result<bool> remove(const BlobKey& key);
  Result<InvalidateResult> invalidate_user(const std::string& user);
  Result<InvalidateResult> clear();

  bool l2_configured() const { return l2_ != nullptr; }
  bool l2_up() const { return l2_ != nullptr && l2_->up(); }  // every shard answers
  bool l2_any_up() const { return l2_ != nullptr && l2_->any_up(); }
  L1Stats l1_stats() const { return l1_.stats(); }
  ShardedL2* l2() { return l2_.get(); }  // nullptr when L1 only
  // The write-back above (called by a shard's health thread with its index, for the entries
  // that shard owns; callable by tests, kAllShards = every entry). Returns the entries written.
  static constexpr size_t kAllShards = static_cast<size_t>(-1);
  uint64_t write_back_l1(size_t shard = kAllShards);
  // Every store metric (docs/kvstore.md lists them) as its current value, into `reg` (a registry
  // made for one rendering: counters are added to, so each is exported once per registry).
  void export_metrics(metrics::Registry& reg) const;
  // Prometheus text exposition of export_metrics (common's metrics registry renders it).
  std::string metrics_text() const;

 private:
  explicit Store(StoreConfig config);
  Status l2_unavailable_after_l1(uint64_t l1_removed, const Error& cause) const;
  void publish(const std::string& event);
  std::string key_event(const BlobKey& key) const;  // "key:<user index key>|<redis name>"
  void on_event(std::string_view event);  // runs on RedisL2's subscriber thread
  // Keys whose last put/remove through this node did not reach L2 (see write-back above).
  void mark_unsynced(const BlobKey& key, bool unsynced);
  uint64_t sync_unsynced(size_t shard);  // the write-back's first pass: returns the keys written or deleted
  bool distrusted(const BlobKey& key);    // an unsynced write (ours or another node's): L2's copy may be stale
  void trust(const BlobKey& key);         // this node wrote L2 itself: its copy is the latest
  std::mutex& write_mu(const BlobKey& key);  // the key's lock stripe: put/remove vs. sync
  static constexpr std::string_view kUnsyncedMark = "|unsynced";

  const StoreConfig config_;
  std::string node_id_;  // random; tags this node's events so it skips its own
  L1Cache l1_;
  std::unique_ptr<ShardedL2> l2_;
  std::atomic<uint64_t> l1_hits_{0}, l1_misses_{0}, l2_hits_{0}, l2_misses_{0}, misses_{0};
  std::atomic<uint64_t> write_backs_{0};
  std::mutex unsynced_mu_;
  std::map<std::string, BlobKey> unsynced_;  // by canonical_key; guarded by unsynced_mu_
  std::map<std::string, Clock::time_point> distrusted_;  // redis names -> until when; guarded by unsynced_mu_
  std::atomic<bool> any_distrusted_{false}, any_unsynced_{false};
  // Held across a key's L2 write and its unsynced mark (put, remove, sync), never with unsynced_mu_
  // held on entry; stripes by a hash of canonical_key.
  std::array<std::mutex, 64> write_mu_;
  std::atomic<uint64_t> puts_{0}, put_bytes_{0}, get_bytes_{0}, rejected_puts_{0}, remote_invalidations_{0};
};

}  // namespace tessera::kvstore
