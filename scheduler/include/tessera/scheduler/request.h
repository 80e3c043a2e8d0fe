// What enters a batcher (Request) and what comes out of it (TokenEvent, FinishEvent).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/step_plan.h"
#include "tessera/scheduler/kv_namespace.h"

namespace tessera::scheduler {

// Preference K/V injection (DESIGN.md, DKI): the preference occupies positions [0, num_tokens)
// and is filled from a kvstore blob (KvFill) instead of being computed; the prompt starts at
// position num_tokens. The request's namespace must carry the user, preference hash and alpha.
struct Preference {
  std::string blob_key{};  // kvstore key, opaque to the scheduler
  int32_t num_tokens = 0;  // P >= 1
  float alpha = 1.0f;      // effective alpha, in (0.1, 0.7]
  std::vector<int32_t> tokens{};  // the preference's tokens, passed in KvFill::tokens so a worker can
                                  // compute them on a kvstore miss (empty: a miss fails the request)
};

struct Request {
  uint64_t id = 0;                // unique among the batcher's live requests
  std::vector<int32_t> prompt{};  // token ids >= 0, at least one
  KvNamespace ns;
  std::optional<Preference> preference;
  SamplingParams sampling;
  int32_t max_tokens = 256;       // >= 1
  std::vector<int32_t> stop_ids{};// extra stop tokens, besides the model's EOS ids
  bool ignore_eos = false;
  int32_t priority = 0;           // higher runs first and is preempted last
  // The wire field `routing_key` (common/routing.h routing_key_for(), filled by the frontend);
  // "" = none (an old client): Router::routing_key() derives one from the prompt prefix.
  std::string routing_key{};
  // Migration (docs/scheduler.md "Migration"): tokens this request already generated on a worker
  // that died, in order. The sequence resumes after them: they are re-prefilled after the prompt
  // (the radix index may hold part of it), they count towards max_tokens and completion_tokens,
  // the next token's index is their count, and the worker gets them as penalty/RNG history.
  // Empty for a new request.
  std::vector<int32_t> generated{};
  // K/V retention (docs/kv.md "StreamingLLM", "H2O"); kNone = full attention.
  KvPolicy kv_policy{};
  // CacheBlend (docs/kv.md "CacheBlend"): reusable documents, positions in `prompt` (in order,
  // disjoint, non-empty); recompute_ratio < 0 = the worker's default. Needs worker capability
  // "chunk_blend"; not with a preference or a K/V policy (Intake refuses them).
  std::vector<BlendChunk> blend_chunks{};
  float recompute_ratio = -1.0f;
};

enum class FinishReason : uint8_t {
  kStop,           // EOS or a stop id was sampled (FinishEvent::stop_token says which)
  kLength,         // max_tokens generated
  kContextLength,  // the sequence filled the model's context
  kCancelled,      // cancel() was called
  kError,          // the worker failed the step or answered with a malformed result
};
std::string_view finish_reason_name(FinishReason r);  // "stop", "length", "context_length", ...

struct Usage {
  int32_t prompt_tokens = 0;         // the request's prompt (preference tokens not included)
  int32_t completion_tokens = 0;     // sampled tokens, a stop token included
  int32_t cached_prompt_tokens = 0;  // prompt tokens whose K/V came from the radix index at first admission
  int32_t preemptions = 0;           // times the request was preempted (recomputed later)
  int32_t reused_prompt_tokens = 0;  // CacheBlend: prompt tokens whose K/V came from cached document K/V
};

// One sampled token that is part of the output. A stop token (EOS or a stop id) is not
// reported as a TokenEvent; it appears in FinishEvent::stop_token.
struct TokenEvent {
  uint64_t request_id = 0;
  int32_t token = 0;
  int32_t index = 0;  // 0 for the first generated token
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

// The log-probabilities of a request's prompt tokens 1..n-1 (sampling.prompt_logprobs >= 0),
// reported once, in the step that computes the last of them (before that step's TokenEvent).
struct PromptLogprobsEvent {
  uint64_t request_id = 0;
  std::vector<float> logprobs;                   // of prompt tokens 1, 2, ..., n - 1
  std::vector<std::vector<TokenLogprob>> top;    // parallel, when alternatives were asked
};

struct FinishEvent {
  uint64_t request_id = 0;
  FinishReason reason = FinishReason::kStop;
  int32_t stop_token = -1;  // with kStop
  Usage usage;
  std::string message{};    // with kError: what went wrong
};

}  // namespace tessera::scheduler
