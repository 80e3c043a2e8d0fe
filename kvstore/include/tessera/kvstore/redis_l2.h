// L2: Redis, shared between nodes. Keys and values are signed (key.h); every value read is
// MAC-checked, and a failure is an error (kPermissionDenied) and a counted metric, never data.
//
// Availability: Redis being down is a normal state. A health thread PINGs the server (every
// `health_interval_ms` while up; with exponential backoff from 100 ms to `max_backoff_ms` while
// down). While down, every operation fails fast with kUnavailable without touching the network;
// an I/O error in an operation marks the server down and wakes the health thread. Connections
// come from a small pool, one per concurrent caller; callers block only on their own I/O.
//
// Per user the keys are also kept in a Redis set (the user index, key.h) so invalidate_user can
// delete them; the index's TTL is refreshed on every put (needs Redis >= 7.0: EXPIRE GT/NX).
//
// Cross-node L1 invalidation: publish_event() PUBLISHes on the channel kEventChannel and a
// subscriber thread hands every event (from any node, this one included) to the `on_event`
// callback — "user:<user index key>" after invalidate_user, "clear" after clear, "key:<user
// index key>|<redis name>" after a put or delete (store.h). The user name itself never goes
// over the wire. With several shards (sharded_l2.h) there is one RedisL2 per shard. Events published while this node is cut off from Redis are
// not replayed: its L1 copies then live until their TTL or LRU eviction (docs/kvstore.md).
//
// Redis coming back: the health thread notices (a) the server reachable again after being down
// and (b) a server that restarted between two health checks (its INFO run_id changed; it may
// have come back empty). Either way it calls `on_back` on the health thread (the Store writes
// its L1 entries back, store.h) and counts a reconnect.
//
// Thread-safety: all methods may be called concurrently. Counters are atomics.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/kvstore/inflight_budget.h"
#include "tessera/kvstore/key.h"

struct redisContext;

namespace tessera::kvstore {

struct RedisConfig {
  std::string host = "127.0.0.1";
  int port = 6379;
  uint32_t ttl_s = 86400;          // default TTL of a value (24 h)
  int connect_timeout_ms = 300;
  int io_timeout_ms = 3000;
  int health_interval_ms = 500;
  int max_backoff_ms = 5000;
  // get_many's pipeline: about this many bytes of replies in flight per connection (a sliding
  // window of GETs, 1..256 keys): self-tuning to the link's bandwidth-delay product between a
  // floor and a ceiling by default, or fixed (0 = one GET round trip per key); inflight_budget.h.
  // tessera-kvstore --redis-get-many-inflight-kb auto|N, --redis-get-many-inflight-{min,max}-kb;
  // kvstore_bench --get-many-inflight-kb compares settings (docs/BENCHMARKS.md).
  InflightBudgetConfig get_many_inflight;
};

// Parses "host:port".
Result<std::pair<std::string, int>> parse_host_port(std::string_view address);

inline constexpr std::string_view kEventChannel = "tessera:pref_kv:events";

struct L2Counters {
  uint64_t hits = 0, misses = 0, puts = 0, errors = 0, mac_failures = 0, reconnects = 0;
  uint64_t bytes_written = 0, bytes_read = 0;
  uint64_t events_received = 0;
};

class RedisL2 {
 public:
  // Fails only on bad configuration (an empty secret); an unreachable server is not an error.
  // `on_event` runs on the subscriber thread (may be empty).
  // `on_back` runs on the health thread each time Redis is back (may be empty; see above).
  static Result<std::unique_ptr<RedisL2>> create(const RedisConfig& config, std::string secret,
                                                 std::function<void(std::string_view)> on_event = {},
                                                 std::function<void()> on_back = {});
  ~RedisL2();
  RedisL2(const RedisL2&) = delete;
  RedisL2& operator=(const RedisL2&) = delete;

  // SET value EX ttl (ttl_s 0 = the configured default) and add the key to the user index.
  Status put(const BlobKey& key, std::string_view blob, uint32_t ttl_s = 0);
  // nullopt on a miss; kPermissionDenied on a MAC failure; kUnavailable when down.
  Result<std::optional<std::string>> get(const BlobKey& key);
  // get() of several keys in one round trip (the GETs pipelined on one connection), one answer
  // per key in order, each as get() answers it (a miss, kPermissionDenied for a MAC failure);
  // when Redis is down, or the connection fails, the keys not yet answered get that kUnavailable.
  std::vector<Result<std::optional<std::string>>> get_many(std::span<const BlobKey> keys);
  Result<bool> exists(const BlobKey& key);
  Result<bool> remove(const BlobKey& key);
  Result<uint64_t> remove_user(const std::string& user);  // keys deleted
  Result<uint64_t> clear();                               // every tessera:pref_kv* key
  Status publish_event(std::string_view event);

  bool up() const { return up_.load(std::memory_order_acquire); }
  L2Counters counters() const;
  // get_many's in-flight budget and the RTT / delivery-rate estimates behind it.
  InflightBudget::Snapshot get_many_budget() const { return budget_.snapshot(); }
  const KeySigner& signer() const { return signer_; }
  const RedisConfig& config() const { return config_; }

 private:
  RedisL2(const RedisConfig& config, std::string secret);
  class Conn;  // a pooled connection; returns itself to the pool
  Result<Conn> acquire();
  void release(redisContext* c, bool healthy);
  void go_down(const std::string& why);    // up_ = false, drop idle connections
  void mark_down(const std::string& why);  // go_down + wake the health thread; not under health_mu_
  std::string ping_once();  // the server's run_id ("" when unreachable)
  void health_loop();
  void subscriber_loop();

  const RedisConfig config_;
  const KeySigner signer_;
  InflightBudget budget_;  // thread-safe itself
  std::atomic<bool> up_{false};
  std::mutex pool_mu_;
  std::vector<redisContext*> idle_;  // GUARDED_BY(pool_mu_)
  std::mutex health_mu_;
  std::condition_variable health_cv_;
  bool stop_ = false;          // GUARDED_BY(health_mu_)
  bool check_now_ = false;     // GUARDED_BY(health_mu_)
  std::thread health_;
  std::function<void(std::string_view)> on_event_;
  std::function<void()> on_back_;
  std::string run_id_;  // GUARDED_BY(health_mu_) after create(): the server's, at the last good check
  std::thread subscriber_;
  redisContext* sub_ctx_ = nullptr;  // GUARDED_BY(health_mu_); shut down to unblock the subscriber
  bool subscribed_ = false;          // GUARDED_BY(health_mu_); create() waits for it when Redis is up
  std::atomic<uint64_t> hits_{0}, misses_{0}, puts_{0}, errors_{0}, mac_failures_{0}, reconnects_{0};
  std::atomic<uint64_t> bytes_written_{0}, bytes_read_{0}, events_received_{0};
};

}  // namespace tessera::kvstore
