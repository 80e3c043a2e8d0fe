// K/V offload, scheduler side (kv_offload.h): the directory, the batcher's spill hook, reload
// admission and the application of ReloadResults.
#include "tessera/scheduler/kv_offload.h"

#include <algorithm>

#include "sequence.h"
#include "tessera/common/check.h"
#include "tessera/common/kv_digest.h"
#include "tessera/common/log.h"

namespace tessera::scheduler {

OffloadDirectory::OffloadDirectory(OffloadConfig config) : config_(config) {
  config_.max_entries = std::max<size_t>(config_.max_entries, 1);
  config_.min_reload_pages = std::max(config_.min_reload_pages, 1);
}

void OffloadDirectory::add(uint64_t hash) {
  if (auto it = map_.find(hash); it != map_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.push_front(hash);
  map_.emplace(hash, lru_.begin());
  while (map_.size() > config_.max_entries) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
}

bool OffloadDirectory::contains(uint64_t hash) const { return map_.contains(hash); }

void OffloadDirectory::touch(uint64_t hash) {
  if (auto it = map_.find(hash); it != map_.end()) lru_.splice(lru_.begin(), lru_, it->second);
}

void OffloadDirectory::erase(uint64_t hash) {
  auto it = map_.find(hash);
  if (it == map_.end()) return;
  lru_.erase(it->second);
  map_.erase(it);
}

void Batcher::enable_offload(OffloadDirectory* directory) {
  offload_ = directory;
  if (directory == nullptr) {
    index_->set_evict_hook({});
    pending_spills_.clear();
    return;
  }
  // Every evicted page goes to the kvstore unless the directory says it is there already. Each
  // spill carries its page's tag (the SHA-256 chain over the namespace key and the path's tokens),
  // which the worker stores in the blob and a reload checks; the radix index computed it once, when
  // it indexed the page (RadixIndex "Tags"), so an eviction hashes nothing.
  index_->set_evict_hook([this](uint64_t ns_hash, std::span<const RadixBlock> blocks, std::span<const KvTag> tags) {
    for (size_t j = 0; j < blocks.size(); ++j) {
      const RadixBlock& b = blocks[j];
      if (offload_->contains(b.hash)) {
        offload_->touch(b.hash);
        continue;
      }
      pending_spills_.push_back(KvSpill{.page = b.page, .hash = b.hash, .ns_hash = ns_hash, .tag = tags[j]});
      ++offload_->stats().spilled_pages;
    }
  });
}

// Admission with a reload: the prompt's full pages after the `use` matched positions, as long as
// their block hashes are in the directory (and at least the last token is left to compute), get
// fresh pages and a KvReload; the sequence runs but computes nothing in this step.
bool Batcher::admit_reload(Planner& p, Sequence& s, int32_t use) {
  const int32_t ps = config_.page_size;
  if (use % ps != 0 || s.lp_next < s.prompt_end || s.req.kv_policy.type != KvPolicyType::kNone) return false;
  const int32_t first = use / ps;
  const std::string ns_key = s.req.ns.canonical();
  const uint64_t ns_hash = RadixIndex::namespace_hash(ns_key);
  uint64_t h = ns_hash;
  std::vector<uint64_t> hashes;
  for (int32_t i = 0; (i + 1) * ps <= s.len() - 1; ++i) {
    h = RadixIndex::block_hash(h, std::span(s.tokens).subspan(static_cast<size_t>(i) * static_cast<size_t>(ps),
                                                               static_cast<size_t>(ps)));
    if (i < first) continue;
    if (!offload_->contains(h)) break;
    hashes.push_back(h);
  }
  const auto n = static_cast<int32_t>(hashes.size());
  if (n < offload_->config().min_reload_pages) return false;
  // Pages for the reload, under the same admission headroom as a first chunk.
  const bool outranks = !q_->running.empty() && s.priority() > q_->running.back()->priority();
  const int32_t headroom = outranks ? 0 : config_.admission_headroom * static_cast<int32_t>(q_->running.size());
  const int32_t need = first + n - static_cast<int32_t>(s.block_table.size());
  if (pages_->num_free() + index_->evictable_pages() - need < headroom) return false;
  if (!ensure_pages(p, s, (first + n) * ps, /*may_preempt_self=*/false)) return false;
  KvReload r{.request_id = s.req.id, .ns_hash = ns_hash, .pages = {}, .hashes = hashes, .tags = {}};
  r.pages.assign(s.block_table.begin() + first, s.block_table.begin() + first + n);
  KvPrefixDigest d(ns_key);  // the tags the blobs must carry: what proves they hold these tokens' K/V
  for (int32_t i = 0; i < first + n; ++i) {
    d.add_page(std::span(s.tokens).subspan(static_cast<size_t>(i) * static_cast<size_t>(ps), static_cast<size_t>(ps)));
    if (i >= first) r.tags.push_back(d.tag());
  }
  p.reloads.push_back(std::move(r));
  for (uint64_t x : hashes) offload_->touch(x);
  s.reload_pending = true;
  s.reload_first = first;
  s.reload_hashes = std::move(hashes);
  OffloadStats& st = offload_->stats();
  ++st.reloads;
  st.reload_pages += n;
  q_->waiting.erase(&s);
  s.reload_counted = !s.admitted_once;
  if (!s.admitted_once) {  // counted as cached; what is not loaded is taken back in apply_reloads
    s.admitted_once = true;
    s.cached_prompt_tokens = std::clamp((first + n) * ps - s.prefix_len, 0, s.prompt_end - s.prefix_len);
    stats_.prompt_tokens += static_cast<int64_t>(s.req.prompt.size());
    stats_.cached_prompt_tokens += s.cached_prompt_tokens;
  }
  ++stats_.admitted;
  s.running = true;
  s.admitted_this_step = true;
  auto& running = q_->running;
  running.insert(std::upper_bound(running.begin(), running.end(), &s, runs_before), &s);
  TS_LOG(kDebug) << "req=" << s.req.id << " | admitted: cached " << use << " of " << s.len() << " positions, reloading "
                 << n * ps << " more from the kvstore";
  return true;
}

// The outstanding plan's reloads: advance each sequence over the pages the worker loaded (and
// index them), drop the first missing hash from the directory, confirm the spills it stored.
void Batcher::apply_reloads(const StepResult& result, bool step_ok) {
  if (offload_ != nullptr && step_ok) {
    for (uint64_t h : result.offloaded) offload_->add(h);
    offload_->stats().offloaded_pages += static_cast<int64_t>(result.offloaded.size());
  }
  const auto ids = std::move(q_->inflight_reloads);
  q_->inflight_reloads.clear();
  size_t k = 0;
  for (uint64_t id : ids) {
    const ReloadResult* rr = nullptr;
    while (step_ok && k < result.reloads.size() && rr == nullptr) {
      if (result.reloads[k].request_id == id) rr = &result.reloads[k];
      ++k;
    }
    auto it = q_->live.find(id);
    if (it == q_->live.end() || !it->second->reload_pending) continue;  // cancelled meanwhile
    Sequence& s = *it->second;
    s.reload_pending = false;
    const auto asked = static_cast<int32_t>(s.reload_hashes.size());
    const int32_t loaded = rr == nullptr ? 0 : std::clamp(rr->pages, 0, asked);
    const int32_t ps = config_.page_size;
    if (offload_ != nullptr) {
      OffloadStats& st = offload_->stats();
      st.reloaded_pages += loaded;
      st.reload_missed_pages += asked - loaded;
      st.reloaded_tokens += static_cast<int64_t>(loaded) * ps;
      if (rr != nullptr) {
        st.reload_bytes += rr->kv_bytes;
        st.reload_ms += rr->transfer_ms;
      }
      if (loaded < asked) offload_->erase(s.reload_hashes[static_cast<size_t>(loaded)]);
    }
    if (loaded < asked && s.reload_counted) {  // not from the cache after all
      const int32_t back = std::min((asked - loaded) * ps, s.cached_prompt_tokens);
      s.cached_prompt_tokens -= back;
      stats_.cached_prompt_tokens -= back;
    }
    s.num_computed = (s.reload_first + loaded) * ps;
    s.reload_hashes.clear();
    if (loaded > 0) cache_prefix(s);
  }
}

}  // namespace tessera::scheduler
