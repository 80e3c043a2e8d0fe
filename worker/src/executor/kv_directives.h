// Private to the StepExecutor: the K/V policy directives of a SeqPlan (common/step_plan.h,
// docs/kv.md "StreamingLLM" and "H2O") — checks, compaction moves, and the per-request H2O
// statistic. Storage-format agnostic: moves go through Backend::read_kv/write_kv (f32 in and
// out, whatever the pool's page dtype), so a pool format change does not touch this file.
//
// Threads: the executor's (one caller at a time). Ownership: H2oState is owned by the executor's
// per-request state map and lives from the request's first H2O step to its release.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"
#include "tessera/worker/backend.h"

namespace tessera {
struct ModelConfig;
}

namespace tessera::worker {

// True when `s` uses any directive that needs the "kv_policy" capability.
bool uses_kv_policy(const SeqPlan& s);

// Moves within the block table's coverage, distinct destinations, |rope_delta| bounded.
// kInvalidArgument / kOutOfRange naming "request N: moves[i]".
Status validate_kv_directives(const SeqPlan& s, const PoolGeometry& pool);

// One request's H2O statistic, indexed by cache index: accumulated attention mass and the RoPE
// position of the token held there. Follows the request's moves.
struct H2oState {
  std::vector<float> mass;
  std::vector<int32_t> pos;
  // Sizes both to the step's extent and starts the step's new tokens at mass 0.
  void begin_step(const SeqPlan& s);
  // The h2o_victims indices of least mass (ties: older position first) among [0, extent)
  // excluding the h2o_recent most recent positions.
  std::vector<int32_t> victims(const SeqPlan& s) const;
};

// Applies s.moves (all sources read, then all destinations written, per layer; K rotated by
// rope_delta with the model's RoPE) and mirrors them in `h2o` when non-null.
Status apply_moves(Backend& backend, const ModelConfig& cfg, const SeqPlan& s, H2oState* h2o);

}  // namespace tessera::worker
