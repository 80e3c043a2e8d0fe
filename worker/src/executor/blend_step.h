// Private to the StepExecutor: the CacheBlend prefills of a step plan (SeqPlan::blend_chunks,
// docs/kv.md "CacheBlend"). Each runs alone through Backend::blend_prefill; its logits row is
// kept here and appended after the ragged forward's rows, and it leaves that batch.
//
// Threads: the executor's (one caller at a time).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"
#include "tessera/worker/backend.h"

namespace tessera::worker {

struct BlendRows {
  std::vector<uint64_t> ids;      // blended requests, in plan order
  std::vector<int32_t> reused;    // parallel: BlendOutcome::hit_tokens (K/V from the chunk cache)
  std::vector<float> rows;        // parallel: one logits row each
  std::vector<float> merged;      // the forward's rows then these (append_to)

  // `forward` (the ragged batch's rows) followed by these rows, in `merged`.
  std::span<float> append_to(std::span<const float> forward);
  int32_t reused_of(uint64_t request_id) const;
};

// The shape rules of a blended SeqPlan: it samples, carries no K/V policy directive or prompt
// scoring, and blend_head holds exactly its start_pos tokens. Errors name the request and field.
Status validate_blend(const SeqPlan& s);

// Runs every blended SeqPlan of `plan` (in plan order) and removes their entries from `batch`
// (parallel to plan.seqs on entry). Errors name the step and request.
Status run_blends(Backend& backend, const StepPlan& plan, std::vector<SeqInput>& batch, BlendRows* out);

}  // namespace tessera::worker
