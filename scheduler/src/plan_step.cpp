// Batcher::step(): one iteration of continuous batching, as named stages (see batcher.h).
// Planning only reserves: pages are allocated and locks taken here, but a sequence's computed
// length advances only when apply() confirms the step.
#include <algorithm>

#include "sequence.h"
#include "tessera/common/check.h"
#include "tessera/common/hash.h"
#include "tessera/common/kv_digest.h"
#include "tessera/common/log.h"

namespace tessera::scheduler {


namespace {
// How much of a matched prefix an admitted sequence reuses.
struct PrefixUse {
  int32_t use = 0;    // positions whose K/V is reused
  int32_t keep = 0;   // matched pages shared as they are (use / page_size)
  int32_t start = 0;  // first position to compute
  bool cow = false;   // the page holding position `use` is shared: copy it before writing into it
  bool fill = false;  // the preference [0, P) is filled from its blob in this step
};

// Rules: at least the last token is computed (its logits are needed); a preference is reused
// whole or filled whole (a KvFill writes the blob from position 0).
PrefixUse decide_prefix_use(int32_t matched, int32_t len, int32_t prefix_len, int32_t page_size) {
  PrefixUse u;
  u.use = std::min(matched, len - 1);
  if (prefix_len > 0 && u.use < prefix_len) u.use = 0;
  u.keep = u.use / page_size;
  u.cow = u.use % page_size != 0;
  u.fill = prefix_len > 0 && u.use == 0;
  u.start = u.fill ? prefix_len : u.use;
  return u;
}

// The K/V policy's directives (kv_compaction.cpp): the step's moves (the block table then also
// covers the retiring pages they read), RoPE positions, the H2O statistic.
void add_kv_directives(Sequence& s, SeqPlan& out) {
  const KvPolicy& k = s.req.kv_policy;
  if (k.type == KvPolicyType::kNone) return;
  if (!s.moves.empty()) {
    out.block_table.assign(s.block_table.begin(), s.block_table.end());
    out.block_table.insert(out.block_table.end(), s.retiring.begin(), s.retiring.end());
    out.moves = std::move(s.moves);
    s.moves.clear();
  }
  if (k.type == KvPolicyType::kH2O) {
    out.rope_offset = s.evicted;  // H2O keeps the tokens' own positions
    out.h2o_recent = k.recent;
  }
}

// CacheBlend: a request with documents is blended unless that is impossible: a preference prefix
// (Intake refuses it) or prompt log-probabilities still to compute (every position's logits are
// needed, and a blend computes only some rows in the later layers). Otherwise it is prefilled as
// usual: the fallback.
const char* blend_impossible(const Sequence& s) {
  if (s.req.blend_chunks.empty()) return nullptr;
  if (s.prefix_len > 0) return "a preference prefix";
  if (s.lp_next < s.prompt_end) return "prompt log-probabilities";
  return s.blend_refused;
}
bool blendable(const Sequence& s) { return !s.req.blend_chunks.empty() && blend_impossible(s) == nullptr; }

// Whether the chunk [start, end) of a blendable sequence reaches a document.
bool reaches_document(const Sequence& s, int32_t start, int32_t end) {
  for (const BlendChunk& c : s.req.blend_chunks) {
    if (c.begin < end && c.begin + c.length > start) return true;
  }
  return false;
}

void schedule(Sequence& s, std::vector<Sequence*>& scheduled, int32_t start, int32_t count) {
  s.in_plan = true;
  s.reserved_decode = false;
  s.sched_start = start;
  s.sched_count = count;
  scheduled.push_back(&s);
}
}  // namespace

Result<StepPlan> Batcher::step() {
  if (outstanding_) {
    return make_error(ErrorCode::kInvalidArgument,
                      "step: plan " + std::to_string(q_->inflight_step) + " has not been applied yet");
  }
  Planner p;
  p.step_id = next_step_id_++;
  order_running();
  schedule_running(p);
  admit_waiting(p);
  StepPlan plan;
  build_plan(p, plan);
  outstanding_ = true;
  ++stats_.steps;
  return plan;
}

// Stage 1: survival order. Preemption victims are taken from the back.
void Batcher::order_running() { std::sort(q_->running.begin(), q_->running.end(), runs_before); }

// Stages 2 and 3: every running decode gets its token; prefills share what is left, in order.
void Batcher::schedule_running(Planner& p) {
  int32_t decodes = 0;
  for (Sequence* s : q_->running) {
    s->in_plan = false;
    s->admitted_this_step = false;
    s->reserved_decode = s->len() - s->num_computed == 1;
    decodes += s->reserved_decode ? 1 : 0;
  }
  p.budget = config_.max_step_tokens - decodes;
  TS_CHECK_GE(p.budget, 0);
  // Victims leave from the back, so index i stays valid; a sequence preempting itself is the last.
  for (size_t i = 0; i < q_->running.size(); ++i) {
    Sequence& s = *q_->running[i];
    const int32_t start = s.num_computed;
    if (s.reserved_decode) {
      compact(p, s);  // K/V policy: drop positions before the cache outgrows its cap
      if (ensure_pages(p, s, s.cache_len() + 1, /*may_preempt_self=*/true)) schedule(s, p.scheduled, start, 1);
      continue;
    }
    const int32_t want = std::min({s.len() - start, p.budget, blendable(s) ? p.budget : config_.max_prefill_chunk});
    if (want <= 0) continue;
    const int32_t n = fit_chunk(p, s, start, want);
    if (n <= 0) continue;
    p.budget -= n;
    plan_blend(s, start, n);
    schedule(s, p.scheduled, start, n);
  }
}

// Stage 4: admission in priority/arrival order; stops at the first request that does not fit,
// so a large request is never starved by smaller ones behind it.
void Batcher::admit_waiting(Planner& p) {
  while (p.budget > 0 && static_cast<int32_t>(q_->running.size()) < config_.max_running) {
    Sequence* next = nullptr;
    for (Sequence* s : q_->waiting) {
      if (s->preempted_in_step != p.step_id) {  // released in this plan: admit next step
        next = s;
        break;
      }
    }
    if (next == nullptr || !admit_one(p, *next)) break;
  }
}

bool Batcher::admit_one(Planner& p, Sequence& s) {
  const int32_t ps = config_.page_size;
  // Match the prefix, lock and share what is reused.
  MatchResult m = index_->match(s.req.ns, s.tokens);
  // Prompt log-probabilities still missing need the logits from position lp_next - 1 on: a
  // cached prefix has K/V but no logits, so only the part before that is reused.
  if (s.lp_next < s.prompt_end) m.matched_tokens = std::min(m.matched_tokens, s.lp_next - 1);
  const PrefixUse u = decide_prefix_use(m.matched_tokens, s.len(), s.prefix_len, ps);
  if (u.use > 0) TS_CHECK(index_->lock(m.handle).ok());
  s.lock = u.use > 0 ? m.handle : RadixHandle{};
  for (int32_t i = 0; i < u.keep; ++i) {
    pages_->retain(m.pages[static_cast<size_t>(i)]);
    s.block_table.push_back(m.pages[static_cast<size_t>(i)]);
  }
  s.indexed_pages = u.keep;
  s.num_computed = u.use;  // 0 with a fill: the fill computes [0, P) in this step
  // K/V offload: reload the continuation of the match from the kvstore instead of prefilling it.
  if (offload_ != nullptr && !u.cow && !u.fill && admit_reload(p, s, u.use)) return true;
  const int32_t start = u.start;
  // Allocate pages for the first chunk (evicting or preempting strictly worse sequences), keeping
  // the admission headroom.
  q_->waiting.erase(&s);
  // A request with documents (CacheBlend) may take the step's whole budget (the fewer steps its
  // blend takes, the more of its reused tokens HKVD ranks together).
  const int32_t want = std::min({s.len() - start, p.budget, blendable(s) ? p.budget : config_.max_prefill_chunk});
  const bool outranks = !q_->running.empty() && s.priority() > q_->running.back()->priority();
  const int32_t headroom = outranks ? 0 : config_.admission_headroom * static_cast<int32_t>(q_->running.size());
  const int32_t need = pages_for(start + std::max(want, 0), ps) - static_cast<int32_t>(s.block_table.size());
  const bool room = pages_->num_free() + index_->evictable_pages() - need >= headroom;
  const int32_t n = want > 0 && room ? fit_chunk(p, s, start, want) : 0;
  if (n <= 0) {  // roll back: nothing of this admission stays
    release_all(s);
    s.num_computed = 0;
    q_->waiting.insert(&s);
    return false;
  }
  if (const char* why = blend_impossible(s); why != nullptr && !s.blend_fallback_counted) {
    s.blend_fallback_counted = true;
    ++stats_.blend_fallbacks;
    TS_LOG(kWarn) << "req=" << s.req.id << " | documents prefilled without CacheBlend: " << why;
  }
  plan_blend(s, start, n);
  // Copy-on-write and preference fill directives.
  if (u.cow) {
    p.copies.push_back(PageCopy{m.pages[static_cast<size_t>(u.keep)], s.block_table[static_cast<size_t>(u.keep)]});
    ++stats_.page_copies;
  }
  if (u.fill) {
    const auto fill_pages = static_cast<size_t>(pages_for(s.prefix_len, ps));
    p.fills.push_back(KvFill{s.req.id, s.req.preference->blob_key,
                             std::vector<int32_t>(s.block_table.begin(), s.block_table.begin() + static_cast<ptrdiff_t>(fill_pages)),
                             s.prefix_len, s.req.preference->alpha, s.req.preference->tokens});
  }
  if (!s.admitted_once) {
    s.admitted_once = true;
    s.cached_prompt_tokens = std::clamp(u.use - s.prefix_len, 0, s.prompt_end - s.prefix_len);  // migrated: not its generated
    stats_.prompt_tokens += static_cast<int64_t>(s.req.prompt.size());
    stats_.cached_prompt_tokens += s.cached_prompt_tokens;
  }
  // Move to the running queue and schedule the first chunk.
  ++stats_.admitted;
  s.running = true;
  s.admitted_this_step = true;
  auto& r = q_->running;
  r.insert(std::upper_bound(r.begin(), r.end(), &s, runs_before), &s);
  p.budget -= n;
  schedule(s, p.scheduled, start, n);
  TS_LOG(kDebug) << "req=" << s.req.id << " | admitted: cached " << u.use << " of " << s.len() << " positions"
                 << (u.cow ? ", copy-on-write" : "") << (u.fill ? ", preference fill" : "");
  return true;
}

// CacheBlend: blend the chunk [start, start + n) when it reaches a document; from the first blended
// chunk on, only pages up to the end of the first document (exact K/V) are indexed.
void Batcher::plan_blend(Sequence& s, int32_t start, int32_t n) {
  if (!blendable(s) || !reaches_document(s, start, start + n)) return;
  if (!config_.blend_steps && start + n < s.len()) {  // such a worker refuses a blend that does not sample
    s.blend_refused = "the worker blends only in one step (no capability blend_steps) and the prompt needs several";
    if (!s.blend_fallback_counted) {
      s.blend_fallback_counted = true;
      ++stats_.blend_fallbacks;
      TS_LOG(kWarn) << "req=" << s.req.id << " | documents prefilled without CacheBlend: " << s.blend_refused;
    }
    return;
  }
  s.blend_now = true;  // counted in blend_steps when build_plan sends it (a preemption may take it back)
  s.index_limit = std::min(s.index_limit, s.req.blend_chunks.front().begin + s.req.blend_chunks.front().length);
}

// Stage 5: pages for positions [0, end_pos). Free pages first, then LRU eviction of unlocked
// cached pages, then preemption of the worst running sequence if it runs after `s` (or `s`
// itself when may_preempt_self). False when the pages cannot be had; `s` was preempted if allowed.
bool Batcher::ensure_pages(Planner& p, Sequence& s, int32_t end_pos, bool may_preempt_self) {
  const int32_t need = pages_for(end_pos, config_.page_size) - static_cast<int32_t>(s.block_table.size());
  if (need <= 0) return true;
  while (pages_->num_free() < need) {
    if (index_->evict(need - pages_->num_free()) > 0) continue;
    Sequence* victim = preemption_victim();  // compacted sequences are never preempted
    if (victim == nullptr) return false;
    if (victim == &s) {
      if (may_preempt_self) preempt(p, s);
      return false;
    }
    if (!runs_before(&s, victim)) return false;
    preempt(p, *victim);
  }
  TS_CHECK(pages_->allocate(need, s.block_table).ok());
  return true;
}

// The largest chunk of at most `want` tokens from position `start` whose pages can be had
// without preempting anything that runs before `s`.
int32_t Batcher::fit_chunk(Planner& p, Sequence& s, int32_t start, int32_t want) {
  if (ensure_pages(p, s, start + want, /*may_preempt_self=*/false)) return want;
  // Everything evictable is gone and no victim is left: take what the free pages allow.
  const int32_t room = (static_cast<int32_t>(s.block_table.size()) + pages_->num_free()) * config_.page_size - start;
  const int32_t n = std::min(want, room);
  if (n <= 0) return 0;
  TS_CHECK(ensure_pages(p, s, start + n, false));
  return n;
}

// Preemption by recompute: keep the computed prefix matchable, release everything, re-queue.
void Batcher::preempt(Planner& p, Sequence& v) {
  TS_CHECK(!v.admitted_this_step) << "req=" << v.req.id << " would be preempted by a later admission";
  TS_CHECK(!v.compacted) << "req=" << v.req.id << " has a compacted cache and cannot be recomputed";
  ++v.preemptions;
  v.blend_now = false;
  if (v.in_plan) {  // scheduled earlier in this step: take it back out
    p.scheduled.erase(std::find(p.scheduled.begin(), p.scheduled.end(), &v));
    p.budget += v.sched_count;
    v.in_plan = false;
  } else if (v.reserved_decode) {
    p.budget += 1;
    v.reserved_decode = false;
  }
  cache_prefix(v);
  release_all(v);
  erase_running(v);
  v.num_computed = 0;
  v.preempted_in_step = p.step_id;
  if (v.worker_has_state) p.released.push_back(v.req.id);
  v.worker_has_state = false;
  q_->waiting.insert(&v);
  ++stats_.preemptions;
  TS_LOG(kDebug) << "req=" << v.req.id << " | preempted at " << v.len() << " positions";
}

// Stage 6: the plan the worker executes.
void Batcher::build_plan(Planner& p, StepPlan& plan) {
  const int32_t ps = config_.page_size;
  plan.step_id = p.step_id;
  plan.copies = std::move(p.copies);
  plan.fills = std::move(p.fills);
  plan.reloads = std::move(p.reloads);
  plan.spills = std::move(pending_spills_);
  pending_spills_.clear();
  q_->inflight_reloads.clear();
  for (const KvReload& r : plan.reloads) q_->inflight_reloads.push_back(r.request_id);
  plan.released = std::move(pending_released_);
  pending_released_.clear();
  plan.released.insert(plan.released.end(), p.released.begin(), p.released.end());
  plan.seqs.reserve(p.scheduled.size());
  q_->inflight.clear();
  q_->inflight_step = p.step_id;
  for (Sequence* sp : p.scheduled) {
    Sequence& s = *sp;
    const int32_t start = s.sched_start;  // token index
    const int32_t end = start + s.sched_count;
    const int32_t cstart = start - s.evicted;  // cache index (= token index until a K/V policy drops positions)
    SeqPlan& out = plan.seqs.emplace_back();
    out.request_id = s.req.id;
    out.tokens.assign(s.tokens.begin() + start, s.tokens.begin() + end);
    out.start_pos = cstart;
    out.block_table.assign(s.block_table.begin(), s.block_table.begin() + pages_for(end - s.evicted, ps));
    add_kv_directives(s, out);
    out.slot_mapping.resize(static_cast<size_t>(s.sched_count));
    for (int32_t i = 0; i < s.sched_count; ++i) {
      const int32_t pos = cstart + i;
      out.slot_mapping[static_cast<size_t>(i)] =
          static_cast<int64_t>(s.block_table[static_cast<size_t>(pos / ps)]) * ps + pos % ps;
    }
    out.sample = end == s.len();
    out.sampling = s.req.sampling;
    if (out.h2o_recent >= 0 && out.sample) {  // victims for the next token, should the cache be full then
      out.h2o_victims = std::max(0, end - s.evicted + 1 - kv_policy_cap(s.req.kv_policy));
    }
    // Score the chunk while prompt log-probabilities are missing at its next positions.
    if (s.lp_next < s.prompt_end && start < s.prompt_end - 1 && end >= s.lp_next) {
      out.prompt_logprobs = true;
      out.next_token = end < s.prompt_end ? s.tokens[static_cast<size_t>(end)] : -1;
    }
    if (s.blend_now) {  // the documents from the first to the last this chunk reaches, whole
      s.blend_now = false;
      ++stats_.blend_steps;
      for (const BlendChunk& c : s.req.blend_chunks) {
        if (c.begin >= end) break;
        out.blend_chunks.push_back(c);
      }
      const int32_t last_end = out.blend_chunks.back().begin + out.blend_chunks.back().length;
      if (last_end > end) out.blend_tail.assign(s.tokens.begin() + end, s.tokens.begin() + last_end);
      // The head: the anchor, and from the document this chunk continues (else its start) on; a
      // worker without blend_steps gets all of [0, start).
      const int32_t anchor = out.blend_chunks.front().begin;
      int32_t from = start;
      for (const BlendChunk& c : out.blend_chunks) {
        if (c.begin < start && c.begin + c.length > start) from = c.begin;
      }
      if (!config_.blend_steps || from <= anchor) from = 0;
      out.blend_head.assign(s.tokens.begin(), s.tokens.begin() + (from == 0 ? start : anchor));
      if (from != 0) out.blend_head.insert(out.blend_head.end(), s.tokens.begin() + from, s.tokens.begin() + start);
      out.blend_head_from = from;
      out.blend_ratio = s.req.recompute_ratio;
      out.blend_salt = kv_name_hash("tessera-blend-salt-v1", s.req.ns.tenant_salt);  // keyed: not computable by clients
    }
    if (!s.worker_has_state) {
      out.generated.assign(s.tokens.begin() + s.prompt_end, s.tokens.end());
      s.worker_has_state = true;
    }
    q_->inflight.push_back(Queues::InFlight{s.req.id, end, out.sample});
    stats_.planned_tokens += s.sched_count;
  }
}

}  // namespace tessera::scheduler
