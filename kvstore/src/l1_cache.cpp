#include "tessera/kvstore/l1_cache.h"

namespace tessera::kvstore {

L1Cache::L1Cache(const L1Config& config) : config_(config) {}

std::string L1Cache::entry_id(const BlobKey& key) {
  std::string id(8, '\0');
  for (int i = 0; i < 8; ++i) id[static_cast<size_t>(i)] = static_cast<char>(key.fingerprint >> (8 * i));
  id += key.hash;
  return id;
}

void L1Cache::remove_locked(std::unordered_map<std::string, Partition>::iterator part,
                            std::list<Entry>::iterator it) {
  Partition& p = part->second;
  const uint64_t size = it->blob->size();
  p.bytes -= size;
  bytes_ -= size;
  --entries_;
  p.index.erase(it->id);
  p.lru.erase(it);
  if (p.lru.empty()) parts_.erase(part);
}

bool L1Cache::evict_global_locked(Bound bound, const Entry* keep) {
  auto victim = parts_.end();
  for (auto it = parts_.begin(); it != parts_.end(); ++it) {
    const Partition& p = it->second;
    if (&p.lru.back() == keep) continue;  // only the entry being put is left there
    if (victim == parts_.end()) {
      victim = it;
      continue;
    }
    const Partition& v = victim->second;
    const uint64_t a = bound == Bound::kEntries ? p.lru.size() : p.bytes;
    const uint64_t b = bound == Bound::kEntries ? v.lru.size() : v.bytes;
    if (a > b || (a == b && p.lru.back().tick < v.lru.back().tick)) victim = it;
  }
  if (victim == parts_.end()) return false;
  remove_locked(victim, std::prev(victim->second.lru.end()));
  ++(bound == Bound::kEntries ? counters_.evictions_entries : counters_.evictions_bytes);
  return true;
}

Status L1Cache::put(const BlobKey& key, Blob blob, Clock::time_point expires_at) {
  TS_CHECK(blob != nullptr);
  const uint64_t size = blob->size();
  if (size > config_.per_user_max_bytes || size > config_.max_bytes) {
    return make_error(ErrorCode::kTooLarge, "blob of " + std::to_string(size) + " bytes exceeds the L1 per-user quota (" +
                                                std::to_string(config_.per_user_max_bytes) + ") or L1 size (" +
                                                std::to_string(config_.max_bytes) + ")");
  }
  if (config_.max_entries == 0) return make_error(ErrorCode::kTooLarge, "L1 holds no entries (max_entries 0)");
  std::lock_guard lock(mu_);
  auto part = parts_.try_emplace(key.user).first;
  Partition& p = part->second;
  std::string id = entry_id(key);
  if (auto old = p.index.find(id); old != p.index.end()) {
    p.bytes -= old->second->blob->size();
    bytes_ -= old->second->blob->size();
    --entries_;
    p.lru.erase(old->second);
    p.index.erase(old);
  }
  p.lru.push_front(Entry{id, std::move(blob), expires_at, ++tick_});
  p.index.emplace(std::move(id), p.lru.begin());
  p.bytes += size;
  bytes_ += size;
  ++entries_;
  const Entry* fresh = &p.lru.front();
  while (p.bytes > config_.per_user_max_bytes) {
    TS_CHECK(&p.lru.back() != fresh) << "per-user quota check let an oversized blob in";
    remove_locked(part, std::prev(p.lru.end()));
    ++counters_.evictions_user_quota;
  }
  while (entries_ > config_.max_entries) {
    TS_CHECK(evict_global_locked(Bound::kEntries, fresh));
  }
  while (bytes_ > config_.max_bytes) {
    TS_CHECK(evict_global_locked(Bound::kBytes, fresh));
  }
  return ok_status();
}

Blob L1Cache::get(const BlobKey& key) {
  std::lock_guard lock(mu_);
  auto part = parts_.find(key.user);
  if (part == parts_.end()) return nullptr;
  auto found = part->second.index.find(entry_id(key));
  if (found == part->second.index.end()) return nullptr;
  auto it = found->second;
  if (it->expires_at <= Clock::now()) {
    remove_locked(part, it);
    ++counters_.expired;
    return nullptr;
  }
  it->tick = ++tick_;
  part->second.lru.splice(part->second.lru.begin(), part->second.lru, it);
  return it->blob;
}

bool L1Cache::contains(const BlobKey& key) {
  std::lock_guard lock(mu_);
  auto part = parts_.find(key.user);
  if (part == parts_.end()) return false;
  auto found = part->second.index.find(entry_id(key));
  if (found == part->second.index.end()) return false;
  if (found->second->expires_at <= Clock::now()) {
    remove_locked(part, found->second);
    ++counters_.expired;
    return false;
  }
  return true;
}

std::optional<L1Cache::Item> L1Cache::peek(const BlobKey& key) const {
  std::lock_guard lock(mu_);
  auto part = parts_.find(key.user);
  if (part == parts_.end()) return std::nullopt;
  auto found = part->second.index.find(entry_id(key));
  if (found == part->second.index.end() || found->second->expires_at <= Clock::now()) return std::nullopt;
  return Item{key, found->second->blob, found->second->expires_at};
}

bool L1Cache::erase(const BlobKey& key) {
  std::lock_guard lock(mu_);
  auto part = parts_.find(key.user);
  if (part == parts_.end()) return false;
  auto found = part->second.index.find(entry_id(key));
  if (found == part->second.index.end()) return false;
  remove_locked(part, found->second);
  return true;
}

uint64_t L1Cache::erase_user(const std::string& user) {
  std::lock_guard lock(mu_);
  auto part = parts_.find(user);
  if (part == parts_.end()) return 0;
  const uint64_t n = part->second.lru.size();
  entries_ -= n;
  bytes_ -= part->second.bytes;
  parts_.erase(part);
  return n;
}

uint64_t L1Cache::erase_users_if(const std::function<bool(const std::string&)>& pred) {
  std::lock_guard lock(mu_);
  uint64_t n = 0;
  for (auto it = parts_.begin(); it != parts_.end();) {
    if (pred(it->first)) {
      n += it->second.lru.size();
      entries_ -= it->second.lru.size();
      bytes_ -= it->second.bytes;
      it = parts_.erase(it);
    } else {
      ++it;
    }
  }
  return n;
}

uint64_t L1Cache::clear() {
  std::lock_guard lock(mu_);
  const uint64_t n = entries_;
  parts_.clear();
  entries_ = 0;
  bytes_ = 0;
  return n;
}

L1Stats L1Cache::stats() const {
  std::lock_guard lock(mu_);
  L1Stats s = counters_;
  s.entries = entries_;
  s.bytes = bytes_;
  s.users = parts_.size();
  return s;
}

std::vector<L1Cache::Item> L1Cache::snapshot() const {
  std::vector<Item> out;
  const auto now = Clock::now();
  std::lock_guard lock(mu_);
  out.reserve(entries_);
  for (const auto& [user, part] : parts_) {
    for (const Entry& e : part.lru) {
      if (e.expires_at <= now || e.id.size() < 8) continue;
      BlobKey key;
      for (int i = 0; i < 8; ++i) key.fingerprint |= uint64_t{static_cast<uint8_t>(e.id[static_cast<size_t>(i)])} << (8 * i);
      key.user = user;
      key.hash = e.id.substr(8);  // entry_id(): 8 bytes of fingerprint (little-endian), then the hash
      out.push_back({std::move(key), e.blob, e.expires_at});
    }
  }
  return out;
}

}  // namespace tessera::kvstore
