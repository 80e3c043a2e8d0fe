// The step executor: applies a StepPlan (common/step_plan.h) exactly as told over one Backend
// (backend.h). Every backend — CPU, CUDA, CUDA tensor-parallel — runs plans through this one
// class; backends only do the math.
//
// execute(plan), in this order:
//   1. validate the whole plan, touching nothing: capabilities (a KvFill needs "kv_fill", each
//      sampled sequence the sampling options it uses), fill and copy page ids, duplicate request
//      ids, sampling parameters and generated-token history, then every sequence's tokens,
//      positions, block table and slot mapping (validate_batch). The first problem is returned
//      (kUnsupported naming the missing capability; kInvalidArgument/kOutOfRange/kTooLarge naming
//      the field) and nothing is applied;
//   2. releases: per-request state of plan.released is dropped;
//   3. page copies (copy-on-write), in plan order;
//   1b. K/V offload spills (set_offload_handler): the evicted pages are read before anything
//      below writes; 3b. reloads after the copies;
//   4. fills, in plan order, through the fill handler (preference K/V injection:
//      worker/preference.h installs one through Engine::set_fill_handler); a handler error fails
//      the step after the copies (the fill's pages are then undefined; the scheduler fails the
//      request);
//   4b. K/V policy directives (docs/kv.md; src/executor/kv_directives.h): each sequence's moves
//      (through read_kv/write_kv, keys re-rotated), then its H2O statistic's slots; the forward
//      adds the attention mass, and step 7 reports SeqResult::victims;
//   5. the forward of all sequences as one ragged batch: forward_argmax when every sampled row
//      is plain greedy and the backend does greedy on the device, forward otherwise;
//   6. sampling: each sampled request keeps a Sampler (penalties history, seeded RNG, grammar
//      matcher; a grammar is compiled in step 1, so a bad one refuses the plan) from its
//      first sampled step until it is released (or reset_requests()); rows are sampled on the
//      backend's host threads when it lends them;
//   7. the StepResult: one SeqResult per sampled sequence in plan order, one FillResult per fill.
//
// Ownership: borrows the Backend (must outlive the executor). Owns the per-request sampler
// states and the fill handler. Threads: not thread-safe; one caller at a time (the worker's
// compute thread). Invariant: num_request_states() counts exactly the requests sampled since
// their last release/reset.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"
#include "tessera/worker/backend.h"

namespace tessera::grammar {
class TokenVocabulary;
}  // namespace tessera::grammar

namespace tessera::worker {

class StepExecutor {
 public:
  explicit StepExecutor(Backend& backend);
  ~StepExecutor();
  StepExecutor(const StepExecutor&) = delete;
  StepExecutor& operator=(const StepExecutor&) = delete;

  // See the top of this file. Errors name the step, sequence/request and field.
  Result<StepResult> execute(const StepPlan& plan);

  // validate_batch against the backend, then Backend::forward. For fills, tools and tests.
  Result<std::span<const float>> forward(std::span<const SeqInput> batch);

  // Executes one KvFill (called by execute() once per fill, after the page copies and before the
  // forward, with the fill's page ids already checked against the pool). Without a handler a
  // plan with fills is refused (kUnsupported).
  using FillHandler = std::function<Result<FillResult>(const KvFill&)>;
  void set_fill_handler(FillHandler handler);
  bool has_fill_handler() const;

  // K/V offload (docs/kv.md "K/V offload to the kvstore"; worker/kv_offload.h implements it).
  // A plan's spills go to spill() before anything of the plan is applied (the pages are read
  // before copies, reloads, fills or the forward can overwrite them), its reloads to reload()
  // after the page copies; take_offloaded() fills StepResult::offloaded at the end of each step.
  // Spilling is best effort (failures are the handler's to count); a reload loads what it can.
  class OffloadHandler {
   public:
    virtual ~OffloadHandler() = default;
    virtual void spill(Backend& backend, std::span<const KvSpill> spills) = 0;
    virtual Result<ReloadResult> reload(Backend& backend, const KvReload& reload) = 0;
    virtual std::vector<uint64_t> take_offloaded() = 0;
  };
  // Not owned (must outlive its use); nullptr = none. With a handler the executor advertises
  // "kv_offload"; without one a plan with spills or reloads is refused (kUnsupported).
  void set_offload_handler(OffloadHandler* handler);

  // Refuses (kUnsupported, naming the capability) a plan that needs something the backend
  // lacks; execute() calls it first. Exposed for tests and for a caller that wants to check
  // a plan before queueing it.
  Status check_capabilities(const StepPlan& plan) const;

  Backend& backend() { return backend_; }
  const Backend& backend() const { return backend_; }
  // What the worker advertises at registration: capability_names(backend name, caps), plus
  // "grammar" once a grammar vocabulary is set.
  std::vector<std::string> capabilities() const;
  // CacheBlend's cumulative counters and chunk cache size (the backend's; blend.h).
  BlendStats blend_stats() const { return backend_.blend_stats(); }

  // Enables structured output (SamplingParams::grammar): `vocab` holds every token's bytes
  // (tessera/grammar/grammar.h). Without it a plan whose sampling has a grammar is refused
  // (kUnsupported naming capability "grammar"). Compiled schemas are cached (64 most recent).
  void set_grammar_vocabulary(std::shared_ptr<const grammar::TokenVocabulary> vocab);

  size_t num_request_states() const;  // requests with live sampler state
  // Forgets every per-request state, as if every live request id had been released (a worker
  // whose scheduler lost track of it registers again; a restarted scheduler reuses request ids).
  // Pool contents are the scheduler's business.
  void reset_requests();

 private:
  struct State;
  Backend& backend_;
  std::unique_ptr<State> state_;
};

}  // namespace tessera::worker
