// Private to the StepExecutor: the CacheBlend prefills of a step plan (SeqPlan::blend_chunks,
// docs/kv.md "CacheBlend"). Each runs alone through Backend::blend_prefill; its logits row is
// kept here and appended after the ragged forward's rows, and it leaves that batch.
//
// Threads: the executor's (one caller at a time).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"
#include "tessera/worker/backend.h"

namespace tessera::worker {

// A step's blended rows, and (kept across steps) each request's reused tokens until it samples.
struct BlendRows {
  std::vector<uint64_t> ids;      // this step's blended requests that sample, in plan order
  std::vector<float> rows;        // parallel: one logits row each
  std::vector<float> merged;      // the forward's rows then these (append_to)
  // BlendOutcome::hit_tokens (K/V from the chunk cache) summed over a request's blended steps so
  // far; taken when it samples, dropped when it is released.
  std::unordered_map<uint64_t, int32_t> reused;

  // `forward` (the ragged batch's rows) followed by these rows, in `merged`.
  std::span<float> append_to(std::span<const float> forward);
  int32_t take_reused(uint64_t request_id);
};

// The shape rules of a blended SeqPlan: it carries no K/V policy directive or prompt scoring,
// blend_head holds exactly its start_pos tokens (less those a blend_head_from leaves out, which no
// chunk this step reaches may need), and a blend_tail completes the last chunk, which the step
// cuts (a step that does not sample). Errors name the request and field.
Status validate_blend(const SeqPlan& s);

// Runs every blended SeqPlan of `plan` (in plan order) and removes their entries from `batch`
// (parallel to plan.seqs on entry); a step that does not sample adds no row. Errors name the
// step and request.
Status run_blends(Backend& backend, const StepPlan& plan, std::vector<SeqInput>& batch, BlendRows* out);

}  // namespace tessera::worker
