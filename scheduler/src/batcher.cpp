// Batcher: construction, request intake, cancellation, and the helpers shared by planning and
// applying (indexing a prefix, releasing, finishing). The step stages are in plan_step.cpp and
// apply_step.cpp.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "sequence.h"
#include "tessera/common/check.h"
#include "tessera/common/log.h"

namespace tessera::scheduler {

namespace {
Error invalid(std::string msg) { return make_error(ErrorCode::kInvalidArgument, std::move(msg)); }
}  // namespace

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kContextLength: return "context_length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

bool needs_worker(const StepPlan& plan) {
  return !plan.seqs.empty() || !plan.copies.empty() || !plan.fills.empty() || !plan.released.empty() ||
         !plan.spills.empty() || !plan.reloads.empty();
}

Result<std::unique_ptr<Batcher>> Batcher::create(BatcherConfig c) {
  if (c.page_size < 1) return invalid("batcher config: page_size must be >= 1 (got " + std::to_string(c.page_size) + ")");
  if (c.num_pages < 1) return invalid("batcher config: num_pages must be >= 1 (got " + std::to_string(c.num_pages) + ")");
  if (c.max_context < 2) return invalid("batcher config: max_context must be >= 2 (got " + std::to_string(c.max_context) + ")");
  if (c.max_running < 1) return invalid("batcher config: max_running must be >= 1 (got " + std::to_string(c.max_running) + ")");
  if (c.max_step_tokens < c.max_running) {
    return invalid("batcher config: max_step_tokens (" + std::to_string(c.max_step_tokens) +
                   ") must be >= max_running (" + std::to_string(c.max_running) + ") so every running sequence can decode");
  }
  if (c.max_prefill_chunk < 1) return invalid("batcher config: max_prefill_chunk must be >= 1");
  if (c.admission_headroom < 0) return invalid("batcher config: admission_headroom must be >= 0");
  if (c.max_waiting < 1) return invalid("batcher config: max_waiting must be >= 1");
  for (int32_t e : c.eos_ids) {
    if (e < 0) return invalid("batcher config: negative eos id " + std::to_string(e));
  }
  return std::unique_ptr<Batcher>(new Batcher(std::move(c)));
}

Batcher::Batcher(BatcherConfig config)
    : config_(std::move(config)),
      pages_(std::make_unique<PageAllocator>(config_.num_pages)),
      index_(std::make_unique<RadixIndex>(*pages_, config_.page_size)),
      q_(std::make_unique<Queues>()) {}

Batcher::~Batcher() = default;

int64_t Batcher::num_waiting() const { return static_cast<int64_t>(q_->waiting.size()); }
int64_t Batcher::num_running() const { return static_cast<int64_t>(q_->running.size()); }
bool Batcher::has_work() const { return !q_->live.empty() || !pending_released_.empty(); }

std::vector<int32_t> Batcher::key_tokens(const Request& r) const {
  std::vector<int32_t> key;
  const int32_t p = r.preference ? r.preference->num_tokens : 0;
  key.reserve(static_cast<size_t>(p) + r.prompt.size() + static_cast<size_t>(r.max_tokens > 0 ? 1 : 0));
  key.assign(static_cast<size_t>(p), -1);  // placeholders: the namespace pins the preference
  key.insert(key.end(), r.prompt.begin(), r.prompt.end());
  return key;
}

int32_t Batcher::cached_prefix_tokens(const Request& r) const {
  const std::vector<int32_t> key = key_tokens(r);
  const int32_t p = r.preference ? r.preference->num_tokens : 0;
  const int32_t hit = index_->peek(r.ns, key);
  return hit > p ? hit - p : 0;
}

Status Batcher::submit(Request r) {
  const std::string who = "request " + std::to_string(r.id) + ": ";
  if (q_->live.count(r.id) != 0 ||
      std::find(pending_released_.begin(), pending_released_.end(), r.id) != pending_released_.end() ||
      std::any_of(q_->inflight.begin(), q_->inflight.end(), [&](const Queues::InFlight& f) { return f.id == r.id; })) {
    return invalid(who + "id is already in use");
  }
  if (r.prompt.empty()) return invalid(who + "prompt is empty");
  for (int32_t t : r.prompt) {
    if (t < 0) return invalid(who + "negative token id " + std::to_string(t) + " in prompt");
  }
  if (r.max_tokens < 1) return invalid(who + "max_tokens must be >= 1 (got " + std::to_string(r.max_tokens) + ")");
  for (int32_t t : r.generated) {
    if (t < 0) return invalid(who + "negative token id " + std::to_string(t) + " in the generated tokens it resumes after");
  }
  if (static_cast<int64_t>(r.generated.size()) >= r.max_tokens) {
    return invalid(who + "resumes after " + std::to_string(r.generated.size()) + " generated tokens, max_tokens is " +
                   std::to_string(r.max_tokens) + ": nothing left to generate");
  }
  int32_t p = 0;
  if (r.preference) {
    p = r.preference->num_tokens;
    if (p < 1) return invalid(who + "preference num_tokens must be >= 1");
    if (r.ns.user.empty() || r.ns.preference_hash == 0) {
      return invalid(who + "a preference needs the namespace's user and preference_hash");
    }
  }
  const int64_t prompt_end = static_cast<int64_t>(p) + static_cast<int64_t>(r.prompt.size());
  if (prompt_end + static_cast<int64_t>(r.generated.size()) >= config_.max_context) {
    return make_error(ErrorCode::kTooLarge, who + "prompt of " + std::to_string(prompt_end) + " positions" +
                                                (r.generated.empty() ? "" : " and " + std::to_string(r.generated.size()) +
                                                                                " generated tokens") +
                                                " leaves no room to generate in a context of " +
                                                std::to_string(config_.max_context));
  }
  if (std::string e = kv_policy_error(r.kv_policy, config_.max_context); !e.empty()) return invalid(who + e);
  int64_t longest = std::min<int64_t>(prompt_end + r.max_tokens, config_.max_context);
  if (const int32_t cap = kv_policy_cap(r.kv_policy); cap > 0) {  // a K/V policy bounds the cache
    longest = std::min<int64_t>(prompt_end + r.max_tokens, std::max<int64_t>(prompt_end, cap));
  }
  const int64_t need = (longest + config_.page_size - 1) / config_.page_size;
  if (need > config_.num_pages) {
    return make_error(ErrorCode::kTooLarge, who + "may need " + std::to_string(need) + " pages, the pool has " +
                                                std::to_string(config_.num_pages));
  }
  if (num_waiting() >= config_.max_waiting) {
    return make_error(ErrorCode::kOverloaded, who + "waiting queue is full (" + std::to_string(config_.max_waiting) + ")");
  }
  auto s = std::make_unique<Sequence>();
  s->tokens = key_tokens(r);
  s->tokens.insert(s->tokens.end(), r.generated.begin(), r.generated.end());  // a migrated request resumes
  s->prefix_len = p;
  s->prompt_end = static_cast<int32_t>(prompt_end);
  // Prompt log-probabilities: the first prompt token has none (nothing, or only the preference,
  // comes before it); the others are scored as their positions are computed.
  s->lp_next = r.sampling.prompt_logprobs >= 0 ? std::min(p + 1, s->prompt_end) : s->prompt_end;
  s->arrival = next_arrival_++;
  s->req = std::move(r);
  Sequence* raw = s.get();
  q_->live.emplace(raw->req.id, std::move(s));
  q_->waiting.insert(raw);
  return ok_status();
}

Result<FinishEvent> Batcher::cancel(uint64_t request_id) {
  auto it = q_->live.find(request_id);
  if (it == q_->live.end()) {
    return make_error(ErrorCode::kNotFound, "cancel: no live request " + std::to_string(request_id));
  }
  ++stats_.cancelled;
  return finish(*it->second, FinishReason::kCancelled, -1, "cancelled");
}

std::vector<FinishEvent> Batcher::fail_all(const std::string& message) {
  std::vector<uint64_t> ids;
  ids.reserve(q_->live.size());
  for (const auto& [id, s] : q_->live) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::vector<FinishEvent> out;
  out.reserve(ids.size());
  for (uint64_t id : ids) out.push_back(finish(*q_->live.at(id), FinishReason::kError, -1, message));
  q_->inflight.clear();
  q_->inflight_reloads.clear();
  outstanding_ = false;
  pending_released_.clear();  // nobody to tell
  pending_spills_.clear();
  return out;
}

// ---- shared helpers ----

void Batcher::cache_prefix(Sequence& s) {
  if (s.compacted) return;  // its pages no longer hold the K/V of a token prefix: never indexed
  const int32_t ps = config_.page_size;
  const int32_t full = std::min(s.num_computed, s.index_limit) / ps;
  if (full <= s.indexed_pages) return;
  TS_CHECK_GE(static_cast<int32_t>(s.block_table.size()), full);
  auto r = index_->insert(s.req.ns, std::span(s.tokens).first(static_cast<size_t>(full) * static_cast<size_t>(ps)),
                          std::span(s.block_table).first(static_cast<size_t>(full)));
  TS_CHECK(r.ok()) << "req=" << s.req.id << " radix insert failed: " << r.error().to_string();
  TS_CHECK(index_->lock(r->handle).ok());
  TS_CHECK(index_->unlock(s.lock).ok()) << "req=" << s.req.id << " lost its radix lock";
  s.lock = r->handle;
  for (size_t i = 0; i < r->pages.size(); ++i) {
    if (r->pages[i] != s.block_table[i]) {  // the index already had this page: share it
      pages_->retain(r->pages[i]);
      pages_->release(s.block_table[i]);
      s.block_table[i] = r->pages[i];
    }
  }
  s.indexed_pages = static_cast<int32_t>(r->pages.size());
}

void Batcher::release_all(Sequence& s) {
  TS_CHECK(index_->unlock(s.lock).ok()) << "req=" << s.req.id << " lost its radix lock";
  s.lock = RadixHandle{};
  for (int32_t p : s.block_table) pages_->release(p);
  for (int32_t p : s.retiring) pages_->release(p);
  s.block_table.clear();
  s.retiring.clear();
  s.indexed_pages = 0;
}

void Batcher::erase_running(Sequence& s) {
  auto& r = q_->running;
  auto it = std::find(r.rbegin(), r.rend(), &s);
  TS_CHECK(it != r.rend());
  r.erase(std::next(it).base());
  s.running = false;
}

FinishEvent Batcher::finish(Sequence& s, FinishReason reason, int32_t stop_token, std::string message) {
  FinishEvent ev;
  ev.request_id = s.req.id;
  ev.reason = reason;
  ev.stop_token = stop_token;
  ev.message = std::move(message);
  ev.usage.prompt_tokens = static_cast<int32_t>(s.req.prompt.size());
  ev.usage.completion_tokens = s.generated();
  ev.usage.cached_prompt_tokens = s.cached_prompt_tokens;
  ev.usage.preemptions = s.preemptions;
  ev.usage.reused_prompt_tokens = s.reused_prompt_tokens;
  if (s.running) {
    // A normal finish indexes what it computed, for the next turn of the conversation.
    if (reason != FinishReason::kCancelled && reason != FinishReason::kError) cache_prefix(s);
    release_all(s);
    erase_running(s);
  } else {
    q_->waiting.erase(&s);
  }
  if (s.worker_has_state) pending_released_.push_back(s.req.id);
  if (reason != FinishReason::kCancelled) ++stats_.finished;
  TS_LOG(kDebug) << "req=" << s.req.id << " | finished: " << finish_reason_name(reason);
  q_->live.erase(s.req.id);  // destroys s
  return ev;
}

Status Batcher::check() const {
  TS_TRY(pages_->check());
  TS_TRY(index_->check());
  auto fail = [](std::string msg) { return make_error(ErrorCode::kInternal, "batcher: " + std::move(msg)); };
  std::unordered_map<int32_t, int32_t> refs;
  size_t running = 0, waiting = 0;
  for (const auto& [id, sp] : q_->live) {
    const Sequence& s = *sp;
    const std::string who = "request " + std::to_string(id);
    if (s.running) {
      ++running;
      if (index_->is_stale(s.lock)) return fail(who + " holds a stale radix lock");
      if (static_cast<int32_t>(s.block_table.size()) < pages_for(s.cache_len(), config_.page_size)) {
        return fail(who + " block table does not cover its computed tokens");
      }
      if (const int32_t cap = kv_policy_cap(s.req.kv_policy); s.compacted && s.cache_len() > cap) {
        return fail(who + " holds " + std::to_string(s.cache_len()) + " cached positions, over its K/V policy's cap " +
                    std::to_string(cap));
      }
      for (int32_t p : s.block_table) ++refs[p];
      for (int32_t p : s.retiring) ++refs[p];
    } else {
      ++waiting;
      if (!s.block_table.empty() || !s.lock.empty()) return fail(who + " is waiting but holds pages or a lock");
      if (q_->waiting.count(const_cast<Sequence*>(&s)) == 0) return fail(who + " is not in the waiting queue");
    }
  }
  if (running != q_->running.size() || waiting != q_->waiting.size()) {
    return fail("queues (" + std::to_string(q_->running.size()) + " running, " + std::to_string(q_->waiting.size()) +
                " waiting) disagree with live requests (" + std::to_string(running) + ", " + std::to_string(waiting) + ")");
  }
  int32_t pinned = 0;
  for (const Pin& pin : pins_) {
    if (index_->is_stale(pin.handle)) return fail("pinned prefix " + std::to_string(pin.info.hash) + " holds a stale radix lock");
    pinned += pin.info.pages;
  }
  if (pinned != pinned_pages_) return fail("pinned page count " + std::to_string(pinned_pages_) + " != " + std::to_string(pinned));
  for (int32_t p = 0; p < pages_->num_pages(); ++p) {
    auto it = refs.find(p);
    const int32_t want = it == refs.end() ? 0 : it->second;
    if (pages_->ref_count(p) != want) {
      return fail("page " + std::to_string(p) + " has reference count " + std::to_string(pages_->ref_count(p)) +
                  " but is in " + std::to_string(want) + " block tables");
    }
  }
  return ok_status();
}

}  // namespace tessera::scheduler
