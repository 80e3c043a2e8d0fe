#include "tessera/kvstore/store.h"

#include <algorithm>
#include <random>

#include "messages.h"  // wire::kMaxTtlSeconds
#include "tessera/common/log.h"
#include "tessera/common/metrics.h"
#include "tessera/kvstore/blob.h"

namespace tessera::kvstore {

Store::Store(StoreConfig config) : config_(std::move(config)), l1_(config_.l1) {
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ rd();
  node_id_ = to_hex(reinterpret_cast<const uint8_t*>(&id), sizeof id);
}
Store::~Store() = default;

Result<std::unique_ptr<Store>> Store::create(StoreConfig config) {
  if (config.default_ttl_s == 0) return make_error(ErrorCode::kOutOfRange, "ttl must be >= 1 s");
  if (config.l1.per_user_max_bytes > config.l1.max_bytes) {
    return make_error(ErrorCode::kInvalidArgument, "per-user L1 quota (" + std::to_string(config.l1.per_user_max_bytes) +
                                                       ") exceeds the L1 size (" + std::to_string(config.l1.max_bytes) + ")");
  }
  std::unique_ptr<Store> s(new Store(std::move(config)));
  std::vector<RedisConfig> shards;
  if (s->config_.redis) shards.push_back(*s->config_.redis);
  shards.insert(shards.end(), s->config_.redis_shards.begin(), s->config_.redis_shards.end());
  for (RedisConfig& rc : shards) rc.ttl_s = s->config_.default_ttl_s;
  if (!shards.empty()) {
    Store* self = s.get();
    TS_ASSIGN_OR_RETURN(s->l2_, ShardedL2::create(
                                    shards, s->config_.secret, [self](std::string_view event) { self->on_event(event); },
                                    [self](size_t shard) { self->write_back_l1(shard); }));
  }
  return s;
}

bool Store::distrusted(const BlobKey& key) {
  if (!any_distrusted_.load() && !any_unsynced_.load()) return false;
  const std::string name = l2_->signer().redis_key(key);
  std::lock_guard<std::mutex> lock(unsynced_mu_);
  if (unsynced_.contains(canonical_key(key))) return true;  // ours: L1 may have lost it before the sync
  auto it = distrusted_.find(name);
  if (it == distrusted_.end()) return false;
  if (it->second > Clock::now()) return true;
  distrusted_.erase(it);
  any_distrusted_.store(!distrusted_.empty());
  return false;
}

void Store::trust(const BlobKey& key) {
  if (!any_distrusted_.load()) return;
  const std::string name = l2_->signer().redis_key(key);
  std::lock_guard<std::mutex> lock(unsynced_mu_);
  distrusted_.erase(name);
  any_distrusted_.store(!distrusted_.empty());
}

std::mutex& Store::write_mu(const BlobKey& key) {
  return write_mu_[std::hash<std::string>{}(canonical_key(key)) % write_mu_.size()];
}

void Store::mark_unsynced(const BlobKey& key, bool unsynced) {
  std::lock_guard<std::mutex> lock(unsynced_mu_);
  if (unsynced) {
    unsynced_[canonical_key(key)] = key;
  } else {
    unsynced_.erase(canonical_key(key));
  }
  any_unsynced_.store(!unsynced_.empty());
}

uint64_t Store::sync_unsynced(size_t shard) {
  std::vector<BlobKey> keys;
  {
    std::lock_guard<std::mutex> lock(unsynced_mu_);
    for (const auto& [canon, key] : unsynced_)
      if (shard == kAllShards || l2_->owner(key) == shard) keys.push_back(key);
  }
  uint64_t synced = 0;
  for (const BlobKey& key : keys) {
    {
      // Under the key's stripe: a put/remove through this node either finished before (then it is
      // no longer on the list, or L1 holds its value) or waits until this write is done.
      std::lock_guard<std::mutex> write(write_mu(key));
      {
        std::lock_guard<std::mutex> lock(unsynced_mu_);
        if (!unsynced_.contains(canonical_key(key))) continue;  // written since, or another node wrote later
      }
      // This node's last word on the key: its L1 entry, or none (removed, evicted or expired).
      const std::optional<L1Cache::Item> in_l1 = l1_.peek(key);
      const auto left_s =
          in_l1 ? std::chrono::duration_cast<std::chrono::seconds>(in_l1->expires_at - Clock::now()).count() : 0;
      const bool ok = left_s >= 1 ? l2_->put(key, *in_l1->blob,
                                             static_cast<uint32_t>(std::min<int64_t>(left_s, config_.default_ttl_s)))
                                        .ok()
                                  : l2_->remove(key).ok();
      if (!ok) continue;  // still unsynced: the next time the shard is back
      mark_unsynced(key, false);
    }
    publish(key_event(key));
    ++synced;
  }
  return synced;
}

uint64_t Store::write_back_l1(size_t shard) {
  if (l2_ == nullptr) return 0;
  const uint64_t synced = sync_unsynced(shard);
  std::vector<L1Cache::Item> items = l1_.snapshot();
  if (shard != kAllShards) {
    std::erase_if(items, [&](const L1Cache::Item& it) { return l2_->owner(it.key) != shard; });
  }
  uint64_t written = 0, failed = 0;
  const auto now = Clock::now();
  for (const L1Cache::Item& it : items) {
    auto present = l2_->exists(it.key);
    if (present.ok() && *present) continue;  // another node (or a put since) wrote it: never overwrite
    const auto left_s = std::chrono::duration_cast<std::chrono::seconds>(it.expires_at - now).count();
    if (left_s < 1) continue;
    const uint32_t ttl = static_cast<uint32_t>(std::min<int64_t>(left_s, config_.default_ttl_s));
    if (present.ok() && l2_->put(it.key, *it.blob, ttl).ok()) {
      ++written;
    } else {
      ++failed;
    }
  }
  write_backs_.fetch_add(written + synced);
  TS_LOG(kInfo) << "redis back" << (shard == kAllShards ? std::string() : " (shard " + l2_->ring().shards()[shard] + ")")
                << ": wrote " << written << " of " << items.size() << " L1 entries back to Redis"
                << (synced > 0 ? ", and synced " + std::to_string(synced) + " keys written or removed while it was down" : "")
      << (failed > 0 ? " (" + std::to_string(failed) + " failed; they stay in L1)" : std::string());
  return written;
}

GetResult Store::get_l1(const BlobKey& key) {
  Blob b = l1_.get(key);
  if (b == nullptr) return {};
  l1_hits_.fetch_add(1);
  get_bytes_.fetch_add(b->size());
  return {std::move(b), Tier::kL1};
}

Result<GetResult> Store::get(const BlobKey& key) {
  TS_TRY(validate_key(key));
  if (GetResult r = get_l1(key); r.blob != nullptr) return r;
  l1_misses_.fetch_add(1);
  if (l2_ != nullptr && !distrusted(key)) {  // the key's shard fails fast when down: then a miss
    auto got = l2_->get(key);
    if (got.ok() && got->has_value()) {
      auto blob = std::make_shared<const std::string>(std::move(**got));
      const Status promoted = l1_.put(key, blob, Clock::now() + std::chrono::seconds(config_.default_ttl_s));
      if (!promoted.ok()) {
        TS_LOG(kDebug) << "user=" << key.user << " | L2 hit not promoted: " << promoted.error().message;
      }
      l2_hits_.fetch_add(1);
      get_bytes_.fetch_add(blob->size());
      return GetResult{std::move(blob), Tier::kL2};
    }
    if (got.ok()) l2_misses_.fetch_add(1);  // MAC failures and outages are counted by RedisL2
  }
  misses_.fetch_add(1);
  return GetResult{};
}

Result<std::vector<GetResult>> Store::get_many(std::span<const BlobKey> keys, size_t max_bytes) {
  // One key's lookup in a window; counted (hits, misses, bytes) only when it is answered.
  struct Looked {
    GetResult r;
    bool l2_miss = false;  // an L1 miss Redis answered "not there"
  };
  std::vector<GetResult> out;
  out.reserve(keys.size());
  size_t bytes = 0;
  std::vector<BlobKey> from_l2;  // this window's L1 misses that may be asked of Redis
  std::vector<size_t> at;        // parallel: their index in keys
  size_t largest = 0;  // the largest blob answered so far in this call
  for (size_t begin = 0, end = 0; begin < keys.size(); begin = end) {
    // A window holds up to kGetManyWindow keys, but no more than the rest of the byte budget
    // takes at the largest blob seen so far (plus one: the answer's last blob may pass it), so a
    // call for many large blobs does not fetch and hold far more than it answers; with nothing
    // seen yet the first window is one key (misses hold nothing: after them, whole windows).
    size_t n = begin == 0 ? 1 : kGetManyWindow;
    if (largest > 0) n = std::min(n, (max_bytes > bytes ? (max_bytes - bytes) / largest : 0) + 1);
    end = std::min(keys.size(), begin + n);
    std::vector<Looked> window(end - begin);
    from_l2.clear();
    at.clear();
    for (size_t i = begin; i < end; ++i) {  // L1 first, in order; a bad key fails the whole call
      TS_TRY(validate_key(keys[i]));
      if (Blob b = l1_.get(keys[i]); b != nullptr) {
        window[i - begin].r = {std::move(b), Tier::kL1};
        continue;
      }
      if (l2_ != nullptr && !distrusted(keys[i])) {
        from_l2.push_back(keys[i]);
        at.push_back(i - begin);
      }
    }
    // The L1 misses: pipelined GETs per shard (a shard that is down answers misses: L1 only).
    std::vector<Result<std::optional<std::string>>> got;
    if (!from_l2.empty()) got = l2_->get_many(from_l2);
    for (size_t j = 0; j < got.size(); ++j) {
      if (!got[j].ok() || !got[j]->has_value()) {
        window[at[j]].l2_miss = got[j].ok();  // MAC failures and outages are counted by RedisL2
        continue;
      }
      auto blob = std::make_shared<const std::string>(std::move(*got[j].value()));
      const Status promoted = l1_.put(from_l2[j], blob, Clock::now() + std::chrono::seconds(config_.default_ttl_s));
      if (!promoted.ok()) {
        TS_LOG(kDebug) << "user=" << from_l2[j].user << " | L2 hit not promoted: " << promoted.error().message;
      }
      window[at[j]].r = GetResult{std::move(blob), Tier::kL2};
    }
    // The answer: a prefix within max_bytes, at least one. Only what it holds is counted, as
    // get() counts it: the keys past the cut are asked again (and counted then).
    for (Looked& l : window) {
      GetResult& r = l.r;
      if (r.blob != nullptr) {
        if (!out.empty() && bytes + r.blob->size() > max_bytes) return out;
        bytes += r.blob->size();
        largest = std::max(largest, r.blob->size());
        get_bytes_.fetch_add(r.blob->size());
      }
      if (r.tier == Tier::kL1) {
        l1_hits_.fetch_add(1);
      } else {
        l1_misses_.fetch_add(1);
        if (r.tier == Tier::kL2) l2_hits_.fetch_add(1);
        if (l.l2_miss) l2_misses_.fetch_add(1);
        if (r.blob == nullptr) misses_.fetch_add(1);
      }
      out.push_back(std::move(r));
    }
  }
  return out;
}

Result<PutResult> Store::put(const BlobKey& key, std::string blob, uint32_t ttl_s) {
  TS_TRY(validate_key(key));
  if (blob.size() > config_.max_blob_bytes) {
    rejected_puts_.fetch_add(1);
    return make_error(ErrorCode::kTooLarge, "blob of " + std::to_string(blob.size()) + " bytes exceeds max_blob_bytes " +
                                                std::to_string(config_.max_blob_bytes));
  }
  auto header = verify_blob(blob);
  if (!header.ok()) {
    rejected_puts_.fetch_add(1);
    return header.take_error();
  }
  if (header->fingerprint != key.fingerprint) {
    rejected_puts_.fetch_add(1);
    return make_error(ErrorCode::kInvalidArgument, "blob fingerprint " + std::to_string(header->fingerprint) +
                                                       " does not match the key's " + std::to_string(key.fingerprint));
  }
  const uint32_t ttl = ttl_s == 0 ? config_.default_ttl_s : ttl_s;
  PutResult out;
  auto shared = std::make_shared<const std::string>(std::move(blob));
  const Status l1 = l1_.put(key, shared, Clock::now() + std::chrono::seconds(ttl));
  out.l1 = l1.ok();
  if (!l1.ok()) out.note = "L1: " + l1.error().message;
  if (l2_ != nullptr) {
    Status l2 = ok_status();
    {
      std::lock_guard<std::mutex> write(write_mu(key));  // not interleaved with the key's sync
      l2 = l2_->put(key, *shared, ttl);
      mark_unsynced(key, !l2.ok());
    }
    if (l2.ok()) trust(key);
    out.l2 = l2.ok();
    if (!l2.ok()) out.note += (out.note.empty() ? "L2: " : "; L2: ") + l2.error().message;
    // Other nodes' L1 copies of this key are stale now; when L2 missed the put, its copy is too.
    publish(key_event(key) + (l2.ok() ? "" : std::string(kUnsyncedMark)));
  }
  if (!out.l1 && !out.l2) {
    rejected_puts_.fetch_add(1);
    return make_error(l1.ok() ? ErrorCode::kUnavailable : l1.error().code, "blob stored in no tier: " + out.note);
  }
  puts_.fetch_add(1);
  put_bytes_.fetch_add(shared->size());
  return out;
}

Result<Tier> Store::exists(const BlobKey& key) {
  TS_TRY(validate_key(key));
  if (l1_.contains(key)) return Tier::kL1;
  if (l2_ != nullptr) {
    auto e = l2_->exists(key);
    if (e.ok() && *e) return Tier::kL2;
  }
  return Tier::kNone;
}

Status Store::l2_unavailable_after_l1(uint64_t l1_removed, const Error& cause) const {
  return make_error(ErrorCode::kUnavailable, "L1 cleared (" + std::to_string(l1_removed) +
                                                 " entries) but L2 was not: " + cause.message + "; retry later");
}

Result<bool> Store::remove(const BlobKey& key) {
  TS_TRY(validate_key(key));
  bool removed = l1_.erase(key);
  if (l2_ != nullptr) {
    Result<bool> r = false;
    {
      std::lock_guard<std::mutex> write(write_mu(key));  // not interleaved with the key's sync
      r = l2_->remove(key);
      mark_unsynced(key, !r.ok());
    }
    if (r.ok()) trust(key);
    // Also when the key's shard is down: other nodes drop their copies (and distrust L2's).
    publish(key_event(key) + (r.ok() ? "" : std::string(kUnsyncedMark)));
    if (!r.ok()) return l2_unavailable_after_l1(removed ? 1 : 0, r.error()).take_error();
    removed = removed || *r;
  }
  return removed;
}

Result<InvalidateResult> Store::invalidate_user(const std::string& user) {
  if (std::string problem = validate_user(user); !problem.empty()) {
    return make_error(ErrorCode::kInvalidArgument, std::move(problem));
  }
  InvalidateResult out;
  out.l1 = l1_.erase_user(user);
  if (l2_ != nullptr) {
    auto r = l2_->remove_user(user);
    publish("user:" + l2_->signer().user_index_key(user));  // also when a shard failed
    if (!r.ok()) return l2_unavailable_after_l1(out.l1, r.error()).take_error();
    out.l2 = *r;
  }
  TS_LOG(kInfo) << "user=" << user << " | invalidated: l1=" << out.l1 << " l2=" << out.l2;
  return out;
}

Result<InvalidateResult> Store::clear() {
  InvalidateResult out;
  out.l1 = l1_.clear();
  if (l2_ != nullptr) {
    auto r = l2_->clear();
    publish("clear");
    if (!r.ok()) return l2_unavailable_after_l1(out.l1, r.error()).take_error();
    out.l2 = *r;
  }
  return out;
}

std::string Store::key_event(const BlobKey& key) const {
  const KeySigner& signer = l2_->signer();
  return "key:" + signer.user_index_key(key.user) + "|" + signer.redis_key(key);  // both contain ':', never '|'

}

void Store::publish(const std::string& event) {
  const Status st = l2_->publish_event(node_id_ + "|" + event);
  if (!st.ok()) {
    TS_LOG(kWarn) << "could not tell other nodes to drop their L1 copies: " << st.error().message;
  }
}

void Store::on_event(std::string_view message) {
  const size_t bar = message.find('|');
  if (bar == std::string_view::npos || message.substr(0, bar) == node_id_) return;  // ours: L1 done already
  const std::string_view event = message.substr(bar + 1);
  if (event == "clear") {
    const uint64_t n = l1_.clear();
    remote_invalidations_.fetch_add(n);
    return;
  }
  if (event.starts_with("key:")) {  // key:<user index key>|<redis name>[|unsynced]
    std::string_view rest = event.substr(4);
    const bool unsynced = rest.ends_with(kUnsyncedMark);
    if (unsynced) rest.remove_suffix(kUnsyncedMark.size());
    const size_t bar2 = rest.find('|');
    if (bar2 == std::string_view::npos) return;
    const std::string_view index_key = rest.substr(0, bar2), name = rest.substr(bar2 + 1);
    {
      std::lock_guard<std::mutex> lock(unsynced_mu_);
      if (unsynced) {  // until the writer's sync; at most as long as the old value can live
        distrusted_[std::string(name)] = Clock::now() + std::chrono::seconds(wire::kMaxTtlSeconds);
      } else {
        distrusted_.erase(std::string(name));
      }
      any_distrusted_.store(!distrusted_.empty());
    }
    const KeySigner& signer = l2_->signer();
    // O(entries) snapshot, hashing outside the L1 lock; only this user's entries get a key HMAC.
    std::string last_user;
    bool first = true, user_matches = false;
    uint64_t n = 0;
    for (const L1Cache::Item& it : l1_.snapshot()) {  // grouped by user (one partition each)
      if (first || it.key.user != last_user) {
        first = false;
        last_user = it.key.user;
        user_matches = signer.user_index_key(it.key.user) == index_key;
      }
      if (user_matches && signer.redis_key(it.key) == name && l1_.erase(it.key)) ++n;
    }
    remote_invalidations_.fetch_add(n);
    {  // another node wrote the key later than this one: its word, not ours, goes to L2
      std::lock_guard<std::mutex> lock(unsynced_mu_);
      std::erase_if(unsynced_, [&](const auto& kv) { return signer.redis_key(kv.second) == name; });
      any_unsynced_.store(!unsynced_.empty());
    }
    return;
  }
  if (event.starts_with("user:")) {
    const std::string_view index_key = event.substr(5);
    const KeySigner& signer = l2_->signer();
    const uint64_t n = l1_.erase_users_if([&](const std::string& u) { return signer.user_index_key(u) == index_key; });
    remote_invalidations_.fetch_add(n);
  }
}

void Store::export_metrics(metrics::Registry& reg) const {
  const L1Stats l1 = l1_.stats();
  const L2Counters l2 = l2_ != nullptr ? l2_->counters() : L2Counters{};
  auto counter = [&](const char* name, const char* help, double value, const metrics::Labels& labels = {}) {
    reg.counter(name, help, labels).inc(value);
  };
  auto gauge = [&](const char* name, const char* help, double value) { reg.gauge(name, help).set(value); };
  constexpr const char* kHits = "Gets answered from a tier (l1: memory, l2: Redis).";
  counter("tessera_kvstore_hits_total", kHits, static_cast<double>(l1_hits_.load()), {{"tier", "l1"}});
  counter("tessera_kvstore_hits_total", kHits, static_cast<double>(l2_hits_.load()), {{"tier", "l2"}});
  constexpr const char* kMisses =
      "Gets a tier could not answer (l1: not in memory; l2: not in Redis; all: answered as a miss).";
  counter("tessera_kvstore_misses_total", kMisses, static_cast<double>(l1_misses_.load()), {{"tier", "l1"}});
  counter("tessera_kvstore_misses_total", kMisses, static_cast<double>(l2_misses_.load()), {{"tier", "l2"}});
  counter("tessera_kvstore_misses_total", kMisses, static_cast<double>(misses_.load()), {{"tier", "all"}});
  counter("tessera_kvstore_puts_total", "Blobs accepted by put (stored in at least one tier).",
          static_cast<double>(puts_.load()));
  counter("tessera_kvstore_rejected_puts_total", "Puts refused (bad blob, too large, stored nowhere).",
          static_cast<double>(rejected_puts_.load()));
  counter("tessera_kvstore_put_bytes_total", "Blob bytes accepted by put.", static_cast<double>(put_bytes_.load()));
  counter("tessera_kvstore_get_bytes_total", "Blob bytes served by get hits.", static_cast<double>(get_bytes_.load()));
  gauge("tessera_kvstore_l1_entries", "Blobs held in L1.", static_cast<double>(l1.entries));
  gauge("tessera_kvstore_l1_bytes", "Blob bytes held in L1 (keys not counted).", static_cast<double>(l1.bytes));
  gauge("tessera_kvstore_l1_users", "Users with at least one L1 entry.", static_cast<double>(l1.users));
  constexpr const char* kEvictions =
      "L1 entries dropped: entries/bytes = global bounds, user_quota = per-user byte quota, expired = TTL.";
  counter("tessera_kvstore_l1_evictions_total", kEvictions, static_cast<double>(l1.evictions_entries), {{"reason", "entries"}});
  counter("tessera_kvstore_l1_evictions_total", kEvictions, static_cast<double>(l1.evictions_bytes), {{"reason", "bytes"}});
  counter("tessera_kvstore_l1_evictions_total", kEvictions, static_cast<double>(l1.evictions_user_quota),
          {{"reason", "user_quota"}});
  counter("tessera_kvstore_l1_evictions_total", kEvictions, static_cast<double>(l1.expired), {{"reason", "expired"}});
  gauge("tessera_kvstore_redis_up", "1 when Redis (L2, every shard) answers, 0 when a shard is down or none is configured.", l2_up() ? 1.0 : 0.0);
  if (l2_ != nullptr) {
    for (const ShardStatus& sh : l2_->shard_status()) {
      reg.gauge("tessera_kvstore_redis_shard_up", "1 when this Redis shard of the L2 answers, 0 when down.",
                {{"shard", sh.address}})
          .set(sh.up ? 1.0 : 0.0);
      reg.counter("tessera_kvstore_redis_shard_errors_total", "Failed operations on this Redis shard (I/O or server errors).",
                  {{"shard", sh.address}})
          .inc(static_cast<double>(sh.counters.errors));
      reg.counter("tessera_kvstore_redis_shard_reconnects_total", "Times this Redis shard came back after being down.",
                  {{"shard", sh.address}})
          .inc(static_cast<double>(sh.counters.reconnects));
      reg.gauge("tessera_kvstore_redis_shard_get_many_inflight_bytes",
                "Bytes of replies a get_many keeps in flight on this shard now (self-tuned or fixed).", {{"shard", sh.address}})
          .set(static_cast<double>(sh.get_many_budget.budget_bytes));
      reg.gauge("tessera_kvstore_redis_shard_rtt_seconds",
                "Round-trip time to this shard: the least of the recent samples (0 before the first).", {{"shard", sh.address}})
          .set(sh.get_many_budget.rtt_s);
      reg.gauge("tessera_kvstore_redis_shard_delivery_rate_bytes_per_second",
                "get_many replies' delivery rate from this shard: the most of the recent samples (0 before the first).",
                {{"shard", sh.address}})
          .set(sh.get_many_budget.rate_bytes_per_s);
    }
  }
  counter("tessera_kvstore_redis_reconnects_total", "Times Redis came back after being down (or restarted).",
          static_cast<double>(l2.reconnects));
  counter("tessera_kvstore_l2_write_backs_total", "L1 entries written back to Redis after it came back without them.",
          static_cast<double>(write_backs_.load()));
  counter("tessera_kvstore_l2_errors_total", "Failed Redis operations (I/O or server errors).", static_cast<double>(l2.errors));
  counter("tessera_kvstore_l2_puts_total", "Values written to Redis.", static_cast<double>(l2.puts));
  counter("tessera_kvstore_l2_bytes_written_total", "Bytes of sealed values written to Redis.",
          static_cast<double>(l2.bytes_written));
  counter("tessera_kvstore_l2_bytes_read_total", "Bytes of values read from Redis.", static_cast<double>(l2.bytes_read));
  counter("tessera_kvstore_l1_remote_invalidations_total",
          "L1 entries dropped because a node (this one included) invalidated their user or cleared the cache.",
          static_cast<double>(remote_invalidations_.load()));
  counter("tessera_kvstore_mac_failures_total",
          "Redis values rejected because their MAC did not match their key (tampered or moved).",
          static_cast<double>(l2.mac_failures));
}

std::string Store::metrics_text() const {
  metrics::Registry reg;
  export_metrics(reg);
  return reg.render();
}

}  // namespace tessera::kvstore
