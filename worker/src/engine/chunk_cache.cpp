// The CacheBlend chunk K/V cache (tessera/worker/blend.h).
#include <algorithm>

#include "tessera/common/hash.h"
#include "tessera/worker/blend.h"

namespace tessera::worker {

uint64_t chunk_key(uint64_t model_fingerprint, uint64_t salt, uint64_t anchor_hash, std::span<const int32_t> chunk) {
  return hash_combine(hash_combine(hash_combine(model_fingerprint, salt), anchor_hash), hash_tokens(chunk));
}

std::shared_ptr<const ChunkKv> ChunkKvCache::find(uint64_t key, std::span<const int32_t> tokens, std::span<const int32_t> anchor,
                                                  uint64_t salt) {
  const auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  const ChunkKv& kv = *it->second->kv;
  if (kv.salt != salt || !std::ranges::equal(kv.tokens, tokens) || !std::ranges::equal(kv.anchor, anchor)) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->kv;
}

int64_t ChunkKvCache::insert(uint64_t key, std::shared_ptr<const ChunkKv> kv) {
  if (const auto it = map_.find(key); it != map_.end()) {
    bytes_ -= static_cast<int64_t>(it->second->kv->bytes());
    lru_.erase(it->second);
    map_.erase(it);
  }
  const auto size = static_cast<int64_t>(kv->bytes());
  if (size > budget_) return 0;
  int64_t evicted = 0;
  while (bytes_ + size > budget_ && !lru_.empty()) {
    bytes_ -= static_cast<int64_t>(lru_.back().kv->bytes());
    map_.erase(lru_.back().key);
    lru_.pop_back();
    ++evicted;
  }
  lru_.push_front({.key = key, .kv = std::move(kv)});
  map_[key] = lru_.begin();
  bytes_ += size;
  return evicted;
}

void ChunkKvCache::clear() {
  lru_.clear();
  map_.clear();
  bytes_ = 0;
}

}  // namespace tessera::worker
