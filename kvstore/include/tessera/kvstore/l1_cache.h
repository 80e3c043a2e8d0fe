// L1: the in-memory tier. A bounded LRU of encoded blobs, partitioned per user.
//
// Policy (bounds are in blob bytes, keys are not counted):
// 1. A user's partition holds at most `per_user_max_bytes`; a put that exceeds it evicts that
//    same user's least recently used entries. A user can never push out more than its quota.
// 2. Globally at most `max_entries` entries and `max_bytes` bytes. On overflow the victim is the
//    least recently used entry of the *largest* partition (by entries for the entry bound, by
//    bytes for the byte bound; ties go to the partition whose LRU entry is older). So a user
//    within its fair share is not evicted while another user holds more than it does.
// 3. The entry being put is never its own victim; a blob larger than per_user_max_bytes or
//    max_bytes is refused (kTooLarge) and the cache is left unchanged.
// 4. An entry may carry an expiry; an expired entry is a miss and is dropped when seen.
// Invariants: entries() == sum of partition sizes; bytes() == sum of blob sizes; both within
// their bounds after every public call; no partition is empty.
//
// Thread-safety: every method locks one internal mutex; blobs are shared immutable strings, so
// a returned blob stays valid after eviction. Cost: O(1) per hit/put, O(users) per global
// eviction (the victim scan).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/kvstore/key.h"

namespace tessera::kvstore {

using Blob = std::shared_ptr<const std::string>;
using Clock = std::chrono::steady_clock;

struct L1Config {
  uint64_t max_bytes = uint64_t{1} << 30;
  uint64_t max_entries = 4096;
  uint64_t per_user_max_bytes = uint64_t{64} << 20;
};

struct L1Stats {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t users = 0;
  uint64_t evictions_entries = 0;     // global entry bound
  uint64_t evictions_bytes = 0;       // global byte bound
  uint64_t evictions_user_quota = 0;  // per-user byte quota
  uint64_t expired = 0;
};

class L1Cache {
 public:
  explicit L1Cache(const L1Config& config);
  L1Cache(const L1Cache&) = delete;
  L1Cache& operator=(const L1Cache&) = delete;

  // Inserts or replaces; marks most recently used. expires_at == time_point::max() = never.
  Status put(const BlobKey& key, Blob blob, Clock::time_point expires_at = Clock::time_point::max());
  // The blob, marked most recently used; nullptr on a miss.
  Blob get(const BlobKey& key);
  // Like get, without touching the LRU order.
  bool contains(const BlobKey& key);
  bool erase(const BlobKey& key);
  uint64_t erase_user(const std::string& user);  // returns entries removed
  // Removes the partitions of every user for which pred(user) holds (called under the lock:
  // pred must not call back into the cache). Returns entries removed.
  uint64_t erase_users_if(const std::function<bool(const std::string&)>& pred);
  uint64_t clear();                              // returns entries removed
  struct Item {
    BlobKey key;
    Blob blob;
    Clock::time_point expires_at;
  };
  // One live entry, without touching the LRU order; nullopt on a miss (the unsynced-key sync).
  std::optional<Item> peek(const BlobKey& key) const;
  // Every live (unexpired) entry, without touching the LRU order (the write-back to Redis after
  // it came back, store.h). O(entries) under the lock; the blobs are shared, not copied.
  std::vector<Item> snapshot() const;
  L1Stats stats() const;
  const L1Config& config() const { return config_; }

 private:
  struct Entry {
    std::string id;  // fingerprint + hash, the key within a partition
    Blob blob;
    Clock::time_point expires_at;
    uint64_t tick;  // last use, for tie-breaking between partitions
  };
  struct Partition {
    std::list<Entry> lru;  // front = most recently used
    std::unordered_map<std::string, std::list<Entry>::iterator> index;
    uint64_t bytes = 0;
  };
  enum class Bound { kEntries, kBytes };

  static std::string entry_id(const BlobKey& key);
  void remove_locked(std::unordered_map<std::string, Partition>::iterator part,
                     std::list<Entry>::iterator it);  // GUARDED_BY(mu_)
  // Evicts one entry for a global bound; false when nothing but `keep` is left.
  bool evict_global_locked(Bound bound, const Entry* keep);

  const L1Config config_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Partition> parts_;  // GUARDED_BY(mu_), by user
  uint64_t entries_ = 0;                              // GUARDED_BY(mu_)
  uint64_t bytes_ = 0;                                // GUARDED_BY(mu_)
  uint64_t tick_ = 0;                                 // GUARDED_BY(mu_)
  L1Stats counters_;                                  // GUARDED_BY(mu_), eviction counters
};

}  // namespace tessera::kvstore
