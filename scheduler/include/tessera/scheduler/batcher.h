// Continuous batching for one worker: the batcher owns that worker's page allocator and radix
// index, queues requests, and each iteration plans one StepPlan and applies its StepResult.
//
// Driving loop (the tessera-scheduler process, one thread per batcher):
//     batcher.submit(request);                  // any time between steps
//     auto plan = batcher.step();               // Result<StepPlan>
//     ... send plan to the worker, receive StepResult ...
//     auto out = batcher.apply(result);         // token and finish events for the clients
//     batcher.cancel(id);                       // any time between calls; frees everything at once
// Exactly one plan is outstanding between step() and apply() (plan, then apply: STYLE.md habit
// 4). Every plan returned by step() must be answered by apply() with its step_id, even an empty
// one; needs_worker(plan) says whether it has anything for the worker (if not, apply
// a StepResult with just that step_id, without sending it).
//
// One step, as named stages (src/plan_step.cpp):
//   1. order running  — running sequences by priority (high first), then arrival (early first);
//   2. reserve decodes — every running sequence in decode gets one token of the budget;
//   3. schedule running — in that order: decodes, and the next prefill chunk of sequences still
//      in prefill (chunked prefill: a chunk is at most max_prefill_chunk tokens and is cut to the
//      remaining token budget);
//   4. admit waiting  — in the same order while the token budget, max_running, pages and the
//      admission headroom allow:
//      match the prefix in the radix index, lock it, copy-on-write a shared page it must write,
//      emit a KvFill for a preference, schedule the first chunk;
//   5. allocate pages — for each scheduled chunk: free pages, else evict unlocked cached pages
//      (LRU), else preempt a victim — the running sequence with the lowest priority, then the
//      latest arrival — by recompute: its computed full pages go into the radix index (so its
//      prefix stays matchable), everything it held is released, it returns to the waiting queue
//      and its id goes to StepPlan::released;
//   6. build plan     — per scheduled sequence: tokens, start position, block table, slot mapping,
//      whether to sample, sampling parameters.
// apply() (src/apply_step.cpp): check the result against the plan, advance each sequence's
// computed length, index completed full pages of prefill chunks, append sampled tokens, check
// stops (EOS, stop ids, max_tokens, context length), finish and release.
//
// Page states (DESIGN.md): a running sequence holds (reference count) every page of its block
// table and locks the radix node covering its indexed prefix; waiting sequences hold nothing.
// Only full pages are shared; the partial last page is private. When a sequence must write into
// a shared page (its whole prompt is cached and the last prompt token has to be recomputed for
// its logits), the page is copied first (StepPlan::copies) and the copy is private.
//
// Invariants after every public call (check() audits them): free + held + cached == total; each
// page's reference count equals the number of block tables holding it; the radix index's own
// invariants; every live request is either waiting or running, once.
//
// Thread-safety: none. One batcher per worker, driven from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"
#include "tessera/scheduler/kv_offload.h"
#include "tessera/scheduler/page_allocator.h"
#include "tessera/scheduler/radix_index.h"
#include "tessera/scheduler/request.h"

namespace tessera::scheduler {

struct BatcherConfig {
  int32_t page_size = 16;         // tokens per page (the worker's)
  int32_t num_pages = 4096;       // the worker's pool
  int32_t max_context = 4096;     // positions per sequence, preference included
  int32_t max_step_tokens = 2048; // token budget per step (decodes + prefill chunks); >= max_running
  int32_t max_prefill_chunk = 512;// tokens of one sequence's prefill per step (several prefills share a step)
  int32_t max_running = 256;      // cap on running sequences
  // Admission headroom, against preemption thrash: a request is admitted only while, after its
  // first chunk, at least this many pages per running sequence stay free or evictable (for their
  // decodes to grow into). Not applied to a request of strictly higher priority than the lowest
  // running one, nor when nothing runs. 0 = admit whenever the first chunk fits.
  int32_t admission_headroom = 1;
  int32_t max_waiting = 4096;     // submit() answers kOverloaded beyond this
  // Pinned prefixes (pin()) may lock at most this many pages together; 0 = half the pool.
  int32_t max_pinned_pages = 0;
  std::vector<int32_t> eos_ids{}; // the model's end-of-sequence tokens
  // CacheBlend (docs/kv.md): the worker blends a prompt over several steps and takes compact
  // heads (capability "blend_steps"). false (a worker without it): a request with documents is
  // blended only in a step that finishes its prompt (one step, the whole head), otherwise
  // prefilled as usual and counted in blend_fallbacks.
  bool blend_steps = true;
};

struct BatcherStats {
  int64_t steps = 0;
  int64_t planned_tokens = 0;      // tokens sent to the worker for computation
  int64_t preemptions = 0;
  int64_t admitted = 0;            // admissions, re-admissions after preemption included
  int64_t prompt_tokens = 0;       // prompt tokens of first admissions
  int64_t cached_prompt_tokens = 0;// of which came from the radix index (prefix cache hit rate = cached / prompt)
  int64_t page_copies = 0;
  int64_t finished = 0;
  int64_t cancelled = 0;
  int64_t kv_compactions = 0;      // K/V policy compactions (docs/kv.md)
  int64_t kv_evicted_tokens = 0;   // positions dropped from sequences' caches by a K/V policy
  int64_t kv_moved_tokens = 0;     // positions moved inside a cache by compactions
  int64_t blend_steps = 0;         // CacheBlend: prefill chunks sent as blends in a plan (a long prompt takes several;
                                   // a chunk planned, then taken back by a preemption in the same step, is not counted)
  int64_t blend_fallbacks = 0;     // requests with documents prefilled without CacheBlend (docs/kv.md):
                                   // prompt log-probabilities, or a prompt a worker without blend_steps cannot blend in one step
};

// A prefix pinned in the radix index (Batcher::pin): its pages are never evicted until unpin().
struct PinnedPrefix {
  uint64_t hash = 0;        // block hash of its last page (RadixIndex), the pin's name
  uint64_t ns_hash = 0;     // RadixIndex::namespace_hash of its namespace
  int32_t tokens = 0;       // a whole number of pages
  int32_t pages = 0;        // tokens / page_size, counted against max_pinned_pages
};

struct StepOutcome {
  std::vector<PromptLogprobsEvent> prompt_logprobs;  // before `tokens` of the same request
  std::vector<TokenEvent> tokens;
  std::vector<FinishEvent> finished;
};

// True when the plan carries anything for the worker (sequences, copies, fills or releases).
bool needs_worker(const StepPlan& plan);

struct Sequence;  // private (src/sequence.h)

class Batcher {
 public:
  // kInvalidArgument names the offending field (page_size < 1, num_pages < 1, max_context < 2,
  // max_running < 1, max_step_tokens < max_running, max_prefill_chunk < 1, admission_headroom < 0, max_waiting < 1,
  // negative eos id).
  static Result<std::unique_ptr<Batcher>> create(BatcherConfig config);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues a request. Errors: kInvalidArgument (empty prompt, negative token id, max_tokens < 1,
  // an id that is live or whose release has not been sent yet, preference without user/hash in
  // the namespace or with num_tokens < 1);
  // kTooLarge (prompt does not leave room for one generated token in max_context, or the longest
  // possible sequence needs more pages than the pool has); kOverloaded (waiting queue full).
  Status submit(Request request);

  // Cancels a live request: releases its pages and locks at once (a result for it still in
  // flight is ignored) and reports its id to the worker in the next plan. kNotFound otherwise.
  Result<FinishEvent> cancel(uint64_t request_id);

  // Ends every live request with FinishReason::kError and `message` (the worker died or was
  // removed): releases all pages and locks, forgets the outstanding plan and pending releases.
  // Cached pages stay in the index. Returns the finish events, in request id order.
  std::vector<FinishEvent> fail_all(const std::string& message);

  // Plans the next step. kInvalidArgument when the previous plan has not been applied yet.
  Result<StepPlan> step();
  // Applies the worker's answer to the outstanding plan. kInvalidArgument (state unchanged)
  // when no plan is outstanding or step_id differs. A failed step (error_code != kOk) or a result
  // that does not match the plan finishes the plan's sequences with FinishReason::kError.
  Result<StepOutcome> apply(const StepResult& result);

  // Pinning (docs/api.md "Pinned prefixes"). pin() locks the radix node that ends after the
  // last full page of `tokens` in `ns`, so those pages stay cached (they are not evictable)
  // until unpin(); the prefix must already be cached up to that page — run it first (the
  // scheduler prewarms it with a one-token request). Pinning an already pinned prefix returns it
  // again. Errors: kInvalidArgument (fewer tokens than one page), kNotFound (only part of the
  // prefix is cached: the message says how much), kOverloaded (the pin would take pinned pages
  // past max_pinned_pages). Each pin counts all its pages, shared with other pins or not.
  Result<PinnedPrefix> pin(const KvNamespace& ns, std::span<const int32_t> tokens);
  // kNotFound when no pin has that hash.
  Status unpin(uint64_t hash);
  std::vector<PinnedPrefix> pins() const;  // by hash
  int32_t pinned_pages() const { return pinned_pages_; }
  int32_t max_pinned_pages() const;

  bool has_work() const;          // any live request (waiting or running) or pending release
  bool plan_outstanding() const { return outstanding_; }
  int64_t num_waiting() const;
  int64_t num_running() const;
  int64_t load() const { return num_waiting() + num_running(); }  // for routing
  // Prompt tokens this worker's radix index holds for the request (routing score); no side effects.
  int32_t cached_prefix_tokens(const Request& request) const;

  const BatcherConfig& config() const { return config_; }
  const PageAllocator& pages() const { return *pages_; }
  const RadixIndex& index() const { return *index_; }
  // Forwards to RadixIndex::set_observer (K/V events); `observer` must outlive this Batcher or be
  // replaced first.
  void set_index_observer(RadixObserver* observer) { index_->set_observer(observer); }
  // K/V offload (kv_offload.h): from now on evicted radix pages are spilled through the plans
  // (StepPlan::spills) and admissions reload prefix continuations held in `directory`
  // (StepPlan::reloads). Only for a worker that advertises "kv_offload". `directory` is not owned
  // and must outlive this Batcher; nullptr turns offload off again.
  void enable_offload(OffloadDirectory* directory);
  bool offload_enabled() const { return offload_ != nullptr; }
  const BatcherStats& stats() const { return stats_; }
  // Full audit (O(pages + nodes + sequences)); the error names the first broken invariant.
  Status check() const;

 private:
  explicit Batcher(BatcherConfig config);

  // ---- step stages (src/plan_step.cpp) ----
  struct Planner;  // per-step working state
  void order_running();
  void schedule_running(Planner& p);
  void admit_waiting(Planner& p);
  bool admit_one(Planner& p, Sequence& s);
  bool ensure_pages(Planner& p, Sequence& s, int32_t end_pos, bool may_preempt_self);
  int32_t fit_chunk(Planner& p, Sequence& s, int32_t start, int32_t want);
  void plan_blend(Sequence& s, int32_t start, int32_t n);  // CacheBlend: mark the chunk blended when it reaches a document
  void preempt(Planner& p, Sequence& victim);
  void build_plan(Planner& p, StepPlan& plan);
  // ---- K/V policies (src/kv_compaction.cpp) ----
  bool compact(Planner& p, Sequence& s);      // before a decode: drop positions per the policy
  Sequence* preemption_victim() const;        // the worst running sequence that may be preempted

  // ---- K/V offload (src/kv_offload.cpp) ----
  bool admit_reload(Planner& p, Sequence& s, int32_t use);  // true: admitted with a KvReload
  void apply_reloads(const StepResult& result, bool step_ok);

  // ---- apply stages (src/apply_step.cpp) ----
  void fail_plan(const std::string& message, StepOutcome& out);
  void advance(Sequence& s, StepOutcome& out, const SeqResult* sampled);
  bool check_stop(Sequence& s, int32_t token, StepOutcome& out);

  // ---- shared helpers (src/batcher.cpp) ----
  void cache_prefix(Sequence& s);            // index s's computed full pages, dedupe, move its lock
  void release_all(Sequence& s);             // unlock, release every page, clear the block table
  FinishEvent finish(Sequence& s, FinishReason reason, int32_t stop_token, std::string message);
  void erase_running(Sequence& s);
  std::vector<int32_t> key_tokens(const Request& r) const;

  BatcherConfig config_;
  std::unique_ptr<PageAllocator> pages_;
  std::unique_ptr<RadixIndex> index_;
  struct Queues;
  std::unique_ptr<Queues> q_;  // sequences, waiting and running queues (src/sequence.h)
  std::vector<uint64_t> pending_released_;
  OffloadDirectory* offload_ = nullptr;  // not owned; null = offload off
  std::vector<KvSpill> pending_spills_;  // evicted pages for the next plan (read before it writes)
  struct Pin {
    PinnedPrefix info;
    RadixHandle handle;  // locked while pinned
  };
  std::vector<Pin> pins_;
  int32_t pinned_pages_ = 0;
  bool outstanding_ = false;
  uint64_t next_step_id_ = 1;
  uint64_t next_arrival_ = 0;
  BatcherStats stats_;
};

}  // namespace tessera::scheduler
