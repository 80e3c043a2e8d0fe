// Batcher: pinned prefixes (batcher.h, "Pinning"). A pin is one extra lock on the radix node
// that ends at the prefix's last full page; a locked node and its ancestors are never evicted,
// split keeps the handle of the deeper half, and a locked node is never merged, so the handle
// stays valid until unpin() releases the lock.
#include <algorithm>
#include <string>

#include "sequence.h"
#include "tessera/common/check.h"

namespace tessera::scheduler {

int32_t Batcher::max_pinned_pages() const {
  return config_.max_pinned_pages > 0 ? config_.max_pinned_pages : std::max(config_.num_pages / 2, 1);
}

Result<PinnedPrefix> Batcher::pin(const KvNamespace& ns, std::span<const int32_t> tokens) {
  const int32_t ps = config_.page_size;
  const auto full = static_cast<int32_t>(tokens.size()) / ps;
  if (full < 1) {
    return make_error(ErrorCode::kInvalidArgument, "a pinned prefix needs at least one whole page (" + std::to_string(ps) +
                                                       " tokens); got " + std::to_string(tokens.size()));
  }
  const auto want = tokens.first(static_cast<size_t>(full) * static_cast<size_t>(ps));
  MatchResult m = index_->match(ns, want);
  if (m.matched_tokens < static_cast<int32_t>(want.size())) {
    return make_error(ErrorCode::kNotFound, "only " + std::to_string(m.matched_tokens) + " of the prefix's " +
                                                std::to_string(want.size()) + " tokens are cached on this worker");
  }
  auto info = index_->inspect(m.handle);
  TS_CHECK(info.ok()) << info.error().to_string();
  for (const Pin& p : pins_) {
    if (p.info.hash == info->hash) return p.info;
  }
  if (pinned_pages_ + full > max_pinned_pages()) {
    return make_error(ErrorCode::kResourceExhausted,
                      "pinning " + std::to_string(full) + " pages would exceed the pin budget: " +
                          std::to_string(pinned_pages_) + " of " + std::to_string(max_pinned_pages()) +
                          " pages are pinned (scheduler --max-pinned-pages)");
  }
  TS_CHECK(index_->lock(m.handle).ok());
  Pin pin{.info = PinnedPrefix{.hash = info->hash,
                               .ns_hash = RadixIndex::namespace_hash(ns.canonical()),
                               .tokens = static_cast<int32_t>(want.size()),
                               .pages = full},
          .handle = m.handle};
  pins_.push_back(pin);
  pinned_pages_ += full;
  return pin.info;
}

Status Batcher::unpin(uint64_t hash) {
  auto it = std::find_if(pins_.begin(), pins_.end(), [&](const Pin& p) { return p.info.hash == hash; });
  if (it == pins_.end()) return make_error(ErrorCode::kNotFound, "no pinned prefix " + std::to_string(hash));
  TS_CHECK(index_->unlock(it->handle).ok()) << "pinned prefix " << hash << " lost its radix lock";
  pinned_pages_ -= it->info.pages;
  pins_.erase(it);
  return ok_status();
}

std::vector<PinnedPrefix> Batcher::pins() const {
  std::vector<PinnedPrefix> out;
  out.reserve(pins_.size());
  for (const Pin& p : pins_) out.push_back(p.info);
  std::sort(out.begin(), out.end(), [](const PinnedPrefix& a, const PinnedPrefix& b) { return a.hash < b.hash; });
  return out;
}

}  // namespace tessera::scheduler
