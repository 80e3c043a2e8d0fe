// Per-request token sampling (SamplingParams in common/step_plan.h).
//
// Pipeline, in this order, over one row of logits:
//   1. penalties over the request's history (the tokens passed to accept()/set_history(),
//      i.e. generated tokens, not the prompt): repetition (CTRL-style: a positive logit is
//      divided by the penalty, a negative one multiplied), then presence (subtract once per
//      seen token) and frequency (subtract per occurrence);
//   2. log-probabilities, when asked: log-softmax of the penalized logits at temperature 1,
//      before any truncation (so they sum to 1 over the whole vocabulary and do not depend on
//      temperature/top-k/top-p/min-p);
//   3. choice: greedy (argmax, lowest id on ties) when temperature == 0 or top_k == 1;
//      otherwise logits / temperature -> top-k -> softmax -> min-p (keep p >= min_p * p_max)
//      -> top-p (smallest most-likely-first prefix whose mass reaches top_p) -> one draw from
//      the renormalized survivors with the request's RNG.
// Stop tokens are the caller's business (the scheduler decides when a request ends).
// Structured output: with a grammar (params.grammar, compiled by the caller), every token the
// grammar does not allow next (tessera/grammar/grammar.h: TokenVocabulary::allowed_tokens,
// budget = grammar_max_tokens - tokens generated so far) gets logit -inf before step 1, so
// log-probabilities and every choice see the constrained distribution.
//
// Determinism: the RNG is std::mt19937_64 seeded with params.seed; uniform numbers are built
// from its 53 high bits, so the same seed and the same logits give the same tokens everywhere.
// Not thread-safe; one Sampler per request.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"

namespace tessera::grammar {
class Matcher;
class TokenVocabulary;
struct Schema;
}  // namespace tessera::grammar

namespace tessera::worker {

// kInvalidArgument naming the field when a parameter is out of its range (temperature >= 0,
// top_p in (0, 1], top_k >= 0, min_p in [0, 1], repetition_penalty > 0, top_logprobs 0..20,
// all finite).
Status validate_sampling_params(const SamplingParams& params);

struct SampleOutcome {
  int32_t token = -1;
  float logprob = 0.0f;            // of token (step 2), when params.logprobs or top_logprobs > 0
  std::vector<TokenLogprob> top;   // params.top_logprobs most likely tokens (step 2), best first
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // Constrained by `schema` (compiled from params.grammar) over `vocab`, which must outlive
  // the Sampler.
  Sampler(const SamplingParams& params, std::shared_ptr<const grammar::Schema> schema,
          const grammar::TokenVocabulary* vocab);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  const SamplingParams& params() const { return params_; }
  // Replaces the penalty history (e.g. after a preemption or a migration the scheduler resends
  // it) and puts the RNG where it is after sampling those tokens (one draw per non-greedy token).
  void set_history(std::span<const int32_t> tokens);
  // Adds a token to the penalty history.
  void accept(int32_t token);

  // Samples one token from `logits` (one entry per vocabulary id; modified in place).
  // logits must be non-empty.
  SampleOutcome sample(std::span<float> logits);

 private:
  double uniform();  // [0, 1)
  // Fills the chosen token's log-probability and the top alternatives when asked.
  SampleOutcome finish_logprobs(std::span<const float> logits, SampleOutcome out, bool want_lp, double log_z) const;

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> counts_;  // token -> occurrences in the history
  std::vector<std::pair<float, int32_t>> cand_;  // scratch: (logit, id)
  std::vector<double> prefix_;                  // scratch: running softmax sums at block boundaries (sample)
  int32_t generated_ = 0;                        // tokens in the history
  // Structured output (null when unconstrained).
  std::shared_ptr<const grammar::Schema> schema_;
  const grammar::TokenVocabulary* vocab_ = nullptr;
  std::unique_ptr<grammar::Matcher> matcher_;
  std::vector<int32_t> allowed_;                 // scratch
  std::vector<float> kept_;                      // scratch: the logits of allowed_
  void constrain(std::span<float> logits);
  void advance_grammar(int32_t token);
};

}  // namespace tessera::worker
