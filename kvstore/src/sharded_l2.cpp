#include "tessera/kvstore/sharded_l2.h"

namespace tessera::kvstore {

Result<std::unique_ptr<ShardedL2>> ShardedL2::create(const std::vector<RedisConfig>& shards, std::string secret,
                                                     std::function<void(std::string_view)> on_event,
                                                     std::function<void(size_t)> on_back) {
  std::vector<std::string> names;
  for (const RedisConfig& c : shards) names.push_back(c.host + ":" + std::to_string(c.port));
  TS_ASSIGN_OR_RETURN(ShardRing ring, ShardRing::create(std::move(names)));
  std::unique_ptr<ShardedL2> l2(new ShardedL2(std::move(ring)));
  l2->shards_.reserve(shards.size());  // never reallocated: callbacks may run while shards start
  for (size_t i = 0; i < shards.size(); ++i) {
    std::function<void()> back;
    if (on_back) back = [on_back, i] { on_back(i); };
    TS_ASSIGN_OR_RETURN(auto shard, RedisL2::create(shards[i], secret, on_event, std::move(back)));
    l2->shards_.push_back(std::move(shard));
  }
  return l2;
}

size_t ShardedL2::owner(const BlobKey& key) const {
  return shards_.size() == 1 ? 0 : ring_.owner(signer().redis_key(key));
}

Status ShardedL2::put(const BlobKey& key, std::string_view blob, uint32_t ttl_s) { return route(key).put(key, blob, ttl_s); }
Result<std::optional<std::string>> ShardedL2::get(const BlobKey& key) { return route(key).get(key); }
Result<bool> ShardedL2::exists(const BlobKey& key) { return route(key).exists(key); }

std::vector<Result<std::optional<std::string>>> ShardedL2::get_many(std::span<const BlobKey> keys) {
  if (shards_.size() == 1) return shards_.front()->get_many(keys);
  std::vector<std::vector<size_t>> of(shards_.size());  // per shard, indices into keys
  for (size_t i = 0; i < keys.size(); ++i) of[owner(keys[i])].push_back(i);
  std::vector<Result<std::optional<std::string>>> out(keys.size(), std::optional<std::string>());
  std::vector<BlobKey> part;
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (of[s].empty()) continue;
    part.clear();
    for (size_t i : of[s]) part.push_back(keys[i]);
    auto got = shards_[s]->get_many(part);
    for (size_t j = 0; j < of[s].size(); ++j) out[of[s][j]] = std::move(got[j]);
  }
  return out;
}
Result<bool> ShardedL2::remove(const BlobKey& key) { return route(key).remove(key); }

Result<uint64_t> ShardedL2::remove_user(const std::string& user) {
  uint64_t removed = 0;
  std::string failed;
  for (const auto& s : shards_) {
    auto r = s->remove_user(user);
    if (r.ok()) {
      removed += *r;
    } else {
      failed += (failed.empty() ? "" : "; ") + s->config().host + ":" + std::to_string(s->config().port) + ": " +
                r.error().message;
    }
  }
  if (!failed.empty()) return make_error(ErrorCode::kUnavailable, "redis shard(s) not cleared: " + failed);
  return removed;
}

Result<uint64_t> ShardedL2::clear() {
  uint64_t removed = 0;
  std::string failed;
  for (const auto& s : shards_) {
    auto r = s->clear();
    if (r.ok()) {
      removed += *r;
    } else {
      failed += (failed.empty() ? "" : "; ") + s->config().host + ":" + std::to_string(s->config().port) + ": " +
                r.error().message;
    }
  }
  if (!failed.empty()) return make_error(ErrorCode::kUnavailable, "redis shard(s) not cleared: " + failed);
  return removed;
}

Status ShardedL2::publish_event(std::string_view event) {
  Status last = make_error(ErrorCode::kUnavailable, "no redis shard is up");
  bool any = false;
  for (const auto& s : shards_) {
    if (!s->up()) continue;
    Status st = s->publish_event(event);
    if (st.ok()) {
      any = true;
    } else {
      last = std::move(st);
    }
  }
  return any ? ok_status() : last;
}

bool ShardedL2::up() const {
  for (const auto& s : shards_) {
    if (!s->up()) return false;
  }
  return true;
}

bool ShardedL2::any_up() const {
  for (const auto& s : shards_) {
    if (s->up()) return true;
  }
  return false;
}

std::vector<ShardStatus> ShardedL2::shard_status() const {
  std::vector<ShardStatus> out;
  for (size_t i = 0; i < shards_.size(); ++i) out.push_back({ring_.shards()[i], shards_[i]->up(), shards_[i]->counters(), shards_[i]->get_many_budget()});
  return out;
}

L2Counters ShardedL2::counters() const {
  L2Counters sum;
  for (const auto& s : shards_) {
    const L2Counters c = s->counters();
    sum.hits += c.hits;
    sum.misses += c.misses;
    sum.puts += c.puts;
    sum.errors += c.errors;
    sum.mac_failures += c.mac_failures;
    sum.reconnects += c.reconnects;
    sum.bytes_written += c.bytes_written;
    sum.bytes_read += c.bytes_read;
    sum.events_received += c.events_received;
  }
  return sum;
}

}  // namespace tessera::kvstore
