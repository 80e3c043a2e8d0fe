// K/V policies in the batcher (docs/kv.md "StreamingLLM", "H2O"): before a decode, a sequence
// whose cache would outgrow its policy's cap drops positions. Its cache is compacted in place by
// moves the worker applies before the step's forward (SeqPlan::moves); from then on:
// - cache index = token index - evicted for new tokens, and the block table covers cache indices;
// - pages past the cap leave the block table (released when the step is applied: the worker
//   still reads them as move sources during the step);
// - pages it shared with the radix index and will write into are copied first (copy-on-write),
//   it never indexes anything again (its pages no longer hold the K/V of a token prefix), and
//   it is never preempted (its cache cannot be recomputed from its tokens) — it never needs a
//   new page either, so it cannot deadlock the pool.
#include <algorithm>

#include "sequence.h"
#include "tessera/common/check.h"
#include "tessera/common/log.h"

namespace tessera::scheduler {

int32_t kv_policy_cap(const KvPolicy& k) {
  switch (k.type) {
    case KvPolicyType::kStreaming: return k.sinks + k.window;
    case KvPolicyType::kH2O: return k.budget;
    case KvPolicyType::kNone: break;
  }
  return 0;
}

bool Batcher::compact(Planner& p, Sequence& s) {
  const KvPolicy& k = s.req.kv_policy;
  if (k.type == KvPolicyType::kNone) return false;
  const int32_t ps = config_.page_size;
  const int32_t len = s.cache_len();
  const int32_t cap = kv_policy_cap(k);
  if (len + 1 <= cap) return false;
  std::vector<KvMove> moves;
  int32_t new_len = 0;
  if (k.type == KvPolicyType::kStreaming) {
    // Keep the sinks and the most recent positions; drop a page's worth (at most the window) at
    // once. RoPE positions stay cache indices: the kept window slides down by `d` positions, so
    // its keys are rotated back by d (the paper's "positions within the cache").
    new_len = cap - std::min(ps, k.window);
    const int32_t d = len - new_len;
    for (int32_t j = k.sinks + d; j < len; ++j) moves.push_back(KvMove{j, j - d, -d});
  } else {
    // H2O: drop the positions the worker ranked least attended (never one of the recent ones);
    // the survivors above the new length fill the holes below it (order does not matter: RoPE
    // positions are the tokens' own, and every cached key precedes the next query).
    const auto need = static_cast<size_t>(len + 1 - cap);
    if (s.victims.size() < need) return false;
    std::vector<int32_t> v(s.victims.begin(), s.victims.begin() + static_cast<std::ptrdiff_t>(need));
    std::sort(v.begin(), v.end());
    if (v.back() >= len || std::adjacent_find(v.begin(), v.end()) != v.end()) return false;
    new_len = len - static_cast<int32_t>(need);
    std::vector<int32_t> srcs;
    for (int32_t j = new_len; j < len; ++j) {
      if (!std::binary_search(v.begin(), v.end(), j)) srcs.push_back(j);
    }
    size_t next = 0;
    for (int32_t hole : v) {
      if (hole < new_len) moves.push_back(KvMove{srcs.at(next++), hole, 0});
    }
    TS_CHECK_EQ(next, srcs.size());
  }
  // Copy-on-write of the shared pages it will write into (moves, and later decodes up to the cap).
  const int32_t keep_pages = pages_for(cap, ps);
  int32_t first_dst = new_len;
  for (const KvMove& m : moves) first_dst = std::min(first_dst, m.dst);
  const int32_t first_page = first_dst / ps;
  const int32_t cow_end = std::min(s.indexed_pages, keep_pages);
  const int32_t n_cow = std::max(0, cow_end - first_page);
  while (pages_->num_free() < n_cow && index_->evict(n_cow - pages_->num_free()) > 0) {
  }
  if (pages_->num_free() < n_cow) return false;  // stays an ordinary sequence this step
  for (int32_t i = first_page; i < cow_end; ++i) {
    std::vector<int32_t> fresh;
    TS_CHECK(pages_->allocate(1, fresh).ok());
    const auto at = static_cast<size_t>(i);
    p.copies.push_back(PageCopy{s.block_table[at], fresh[0]});
    pages_->release(s.block_table[at]);  // still locked in the index through s.lock until release_all
    s.block_table[at] = fresh[0];
    ++stats_.page_copies;
  }
  s.indexed_pages = std::min(s.indexed_pages, first_page);
  // Pages past the cap retire once the worker has read them.
  if (static_cast<int32_t>(s.block_table.size()) > keep_pages) {
    s.retiring.insert(s.retiring.end(), s.block_table.begin() + keep_pages, s.block_table.end());
    s.block_table.resize(static_cast<size_t>(keep_pages));
  }
  const int32_t dropped = len - new_len;
  s.evicted += dropped;
  s.compacted = true;
  stats_.kv_compactions += 1;
  stats_.kv_evicted_tokens += dropped;
  stats_.kv_moved_tokens += static_cast<int64_t>(moves.size());
  s.moves = std::move(moves);
  TS_LOG(kDebug) << "req=" << s.req.id << " | kv " << kv_policy_type_name(k.type) << ": dropped " << dropped
                 << " positions, cache " << len << " -> " << new_len << ", " << s.moves.size() << " moves";
  return true;
}

Sequence* Batcher::preemption_victim() const {
  for (auto it = q_->running.rbegin(); it != q_->running.rend(); ++it) {
    if (!(*it)->compacted) return *it;
  }
  return nullptr;
}

}  // namespace tessera::scheduler
