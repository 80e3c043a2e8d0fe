// Private: one request's life inside a Batcher, and the batcher's queues.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "tessera/scheduler/batcher.h"

namespace tessera::scheduler {

struct Sequence {
  Request req;
  // Radix key and position space: [prefix_len placeholders for the preference] + prompt + generated.
  std::vector<int32_t> tokens;
  int32_t prefix_len = 0;    // P: positions filled from the preference blob
  int32_t prompt_end = 0;    // P + prompt size
  int32_t num_computed = 0;  // positions whose K/V is in the block table's pages (confirmed by apply)
  std::vector<int32_t> block_table;  // held pages, covering at least [0, num_computed)
  RadixHandle lock;          // locked radix node covering the indexed prefix (empty: none)
  int32_t indexed_pages = 0; // leading block-table pages known to be the index's own
  uint64_t arrival = 0;
  bool running = false;
  bool worker_has_state = false;
  bool admitted_once = false;
  int32_t cached_prompt_tokens = 0;
  // Planning state of the current step.
  bool in_plan = false;
  bool reserved_decode = false;
  bool admitted_this_step = false;
  int32_t sched_start = 0;
  int32_t sched_count = 0;
  uint64_t preempted_in_step = 0;
  int32_t preemptions = 0;  // times preempted, for the finish event's usage
  // K/V policy (kv_compaction.cpp). Cache index = token index - evicted for every token computed
  // after the first compaction; the block table covers cache indices.
  int32_t evicted = 0;                // positions computed and dropped from the cache
  bool compacted = false;             // compacted once: never indexed again, never preempted
  std::vector<int32_t> victims;       // H2O: cache indices the worker ranked least attended
  std::vector<KvMove> moves;          // planned for this step (SeqPlan::moves)
  std::vector<int32_t> retiring;      // pages past the policy's cap: held until the step is applied

  // K/V offload (kv_offload.cpp): a KvReload of pages [reload_first, reload_first + hashes) is in
  // the outstanding plan; num_computed advances over what the worker loaded when it is applied.
  bool reload_pending = false;
  bool reload_counted = false;  // this reload set cached_prompt_tokens (first admission)
  int32_t reload_first = 0;
  std::vector<uint64_t> reload_hashes;

  int32_t cache_len() const { return num_computed - evicted; }

  // CacheBlend (docs/kv.md): the chunk planned in this step is blended (it reaches a document
  // past what the pages hold; a prompt longer than a step's budget is blended over several
  // steps); pages past index_limit hold fused (approximate) K/V and are never indexed.
  bool blend_now = false;
  bool blend_fallback_counted = false;  // a request with documents that cannot blend: counted and logged once
  // Set when a chunk reaching a document could not be blended by a worker without multi-step
  // blends (BatcherConfig::blend_steps): the rest of the prompt is prefilled as usual, for good.
  const char* blend_refused = nullptr;
  int32_t index_limit = INT32_MAX;
  int32_t reused_prompt_tokens = 0;  // as the first sample reported it (reused_counted)
  bool reused_counted = false;

  // Prompt log-probabilities (req.sampling.prompt_logprobs >= 0): the next prompt position whose
  // log-probability is missing (prompt_end: all there, or none asked), and those gathered so far
  // for positions [prefix_len + 1, lp_next). Position q is scored from the logits of q - 1, so
  // a matched prefix is reused only up to lp_next - 1 (admit_one) and scored chunks survive a
  // preemption (only what is missing is computed again).
  int32_t lp_next = 0;
  std::vector<float> prompt_lp;
  std::vector<std::vector<TokenLogprob>> prompt_top;

  int32_t len() const { return static_cast<int32_t>(tokens.size()); }
  int32_t generated() const { return len() - prompt_end; }
  int32_t priority() const { return req.priority; }
};

// Higher priority first, then earlier arrival: the order of admission and of survival.
inline bool runs_before(const Sequence* a, const Sequence* b) {
  if (a->priority() != b->priority()) return a->priority() > b->priority();
  return a->arrival < b->arrival;
}

struct RunsBefore {
  bool operator()(const Sequence* a, const Sequence* b) const { return runs_before(a, b); }
};

struct Batcher::Queues {
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> live;
  std::set<Sequence*, RunsBefore> waiting;  // priority, arrival are fixed while queued
  std::vector<Sequence*> running;           // sorted by runs_before at the start of each step
  struct InFlight {
    uint64_t id;
    int32_t end_pos;  // num_computed once the step is applied
    bool sample;
  };
  uint64_t inflight_step = 0;
  std::vector<InFlight> inflight;
  std::vector<uint64_t> inflight_reloads;  // request ids of the outstanding plan's KvReloads, in order
};

// Per-step working state of Batcher::step() (plan_step.cpp, kv_compaction.cpp).
struct Batcher::Planner {
  uint64_t step_id = 0;
  int32_t budget = 0;                // tokens left in this step
  std::vector<Sequence*> scheduled;  // plan order
  std::vector<PageCopy> copies;
  std::vector<KvFill> fills;
  std::vector<KvReload> reloads;
  std::vector<uint64_t> released;    // preempted in this step
};

// Positions a sequence's cache holds at most under policy k (0: no cap).
int32_t kv_policy_cap(const KvPolicy& k);

inline int32_t pages_for(int32_t positions, int32_t page_size) { return (positions + page_size - 1) / page_size; }

}  // namespace tessera::scheduler
