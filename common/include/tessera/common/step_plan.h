// The step plan: what the scheduler tells a worker to compute in one iteration, and what the
// worker answers. Plain data; the msgpack codec lives in protocol.h. The scheduler is the only
// author of plans; a worker executes them exactly as told (DESIGN.md, Processes).
//
// Invariants of a well-formed plan (checked by the worker on receipt, errors reported per step):
// - every page id is in [0, num_pages) of that worker's pool;
// - for each SeqPlan, slot_mapping.size() == tokens.size() and
//   slot_mapping[i] == block_table[(start_pos + i) / page_size] * page_size + (start_pos + i) % page_size;
// - block_table covers positions [0, start_pos + tokens.size());
// - a request id appears at most once per plan.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/common/result.h"

namespace tessera {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // nucleus mass in (0, 1]
  int32_t top_k = 0;         // 0 = off
  float min_p = 0.0f;        // 0 = off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // 1 = off (CTRL-style: divide positive logits, multiply negative)
  float presence_penalty = 0.0f;    // OpenAI-style, over generated tokens
  float frequency_penalty = 0.0f;   // OpenAI-style, over generated tokens
  uint64_t seed = 0;                // per-request RNG seed; same seed + same plan -> same tokens
  int32_t top_logprobs = 0;         // also return the n most likely alternatives (0..20)
  bool logprobs = false;            // return the chosen token's log-probability
  // Added to the logits of these tokens before anything else (OpenAI `logit_bias`): token id
  // (< vocabulary size) -> bias in [-100, 100]; at most kMaxLogitBias entries. Empty = off
  // (omitted from the wire).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Structured output (tessera/grammar/grammar.h): a JSON Schema as JSON text; the sampled
  // tokens spell a compact JSON value it accepts, followed by one of grammar_end_tokens.
  // grammar_max_tokens (the request's max_tokens; 0 = unknown) lets the value be closed in
  // time. Empty grammar = unconstrained (all three omitted from the wire).
  std::string grammar;
  std::vector<int32_t> grammar_end_tokens;
  int32_t grammar_max_tokens = 0;
  // Prompt log-probabilities (OpenAI `echo` + `logprobs` on completions): -1 = off (omitted from
  // the wire); n >= 0 = the log-probability of every prompt token given the ones before it, with
  // the n most likely alternatives (0..20). Request-level: the scheduler scores the prompt's
  // prefill chunks (SeqPlan::prompt_logprobs) and never reuses cached prefix pages whose logits
  // it still needs; needs the worker capability "prompt_logprobs".
  int32_t prompt_logprobs = -1;
};
inline constexpr size_t kMaxLogitBias = 1024;
inline constexpr size_t kMaxGrammarBytes = 64 * 1024;
inline constexpr size_t kMaxGrammarEndTokens = 64;

// The backend capabilities (names as a worker advertises them in `register`: "greedy",
// "temperature", "top_k", "top_p", "min_p", "penalties", "logprobs", "grammar") that sampling with `p`
// needs. One rule for the worker, which refuses a plan needing one its backend lacks, and for
// the scheduler, which routes a request only to workers that advertise all of them.
std::vector<std::string_view> required_sampling_capabilities(const SamplingParams& p);

// K/V retention policy of one request (docs/kv.md "StreamingLLM", "H2O"). kNone keeps every
// position (full attention). kStreaming keeps the first `sinks` positions (attention sinks) and
// the most recent `window` ones, with RoPE positions re-assigned inside the cache, so generation
// may run past the model's context. kH2O keeps at most `budget` positions: the `recent` most
// recent ones plus the heavy hitters (largest accumulated attention), RoPE positions unchanged.
// Plain data shared by the frontend (API field kv_policy), the wire and the scheduler.
enum class KvPolicyType : uint8_t { kNone, kStreaming, kH2O };
struct KvPolicy {
  KvPolicyType type = KvPolicyType::kNone;
  int32_t sinks = 0;   // streaming: >= 0
  int32_t window = 0;  // streaming: >= 1
  int32_t budget = 0;  // h2o: >= 2
  int32_t recent = 0;  // h2o: in [0, budget)
  bool operator==(const KvPolicy&) const = default;
};
std::string_view kv_policy_type_name(KvPolicyType t);  // "none", "streaming", "h2o"
// The rule every layer applies: "" when `p` is well formed for a model of `max_context`
// positions (0 = unknown: no context bound), else what is wrong, naming the field
// ("kv_policy.window must be >= 1 (got 0)").
std::string kv_policy_error(const KvPolicy& p, int32_t max_context);

// Move one cached position of a sequence to another (H2O / StreamingLLM compaction): K/V of
// cache index `src` go to cache index `dst` (both through the sequence's block table) in
// every layer, K rotated by `rope_delta` positions (RoPE is a rotation: R(p + d) = R(d) R(p)).
struct KvMove {
  int32_t src = 0;
  int32_t dst = 0;
  int32_t rope_delta = 0;
};

// CacheBlend (docs/kv.md "CacheBlend"): a reusable document inside a prompt, tokens
// [begin, begin + length) of the sequence (positions). Chunks of one request are in order and
// disjoint. At most kMaxBlendChunks per request.
struct BlendChunk {
  int32_t begin = 0;
  int32_t length = 0;
  bool operator==(const BlendChunk&) const = default;
};
inline constexpr size_t kMaxBlendChunks = 64;

// One sequence's share of a step.
struct SeqPlan {
  uint64_t request_id = 0;
  std::vector<int32_t> tokens;        // tokens to compute now (a prefill chunk or one decode token)
  int32_t start_pos = 0;              // position of tokens[0]
  std::vector<int32_t> block_table;   // page ids covering positions [0, start_pos + tokens.size())
  std::vector<int64_t> slot_mapping;  // per token: page_id * page_size + offset, where its K/V is written
  bool sample = false;                // sample a token from the logits of the last token
  SamplingParams sampling;            // used when sample (and for penalties' history)
  // Tokens generated so far for this request (for penalties), sent only when the worker has no
  // state for the request (first step or after preemption); otherwise the worker tracks them.
  std::vector<int32_t> generated;
  // K/V policy directives (docs/kv.md); all omitted from the wire at their defaults, and a plan
  // using any of them needs the worker capability "kv_policy".
  // start_pos and slot_mapping are cache indices (positions in the block table); the RoPE
  // position of tokens[i] is start_pos + i + rope_offset (0: cache index = position).
  int32_t rope_offset = 0;
  // Applied before the forward (after the plan's copies and fills), as one parallel move: every
  // source is read before any destination is written. Indices are below block_table.size() *
  // page_size; the block table may cover more than [0, start_pos + tokens.size()) for them.
  std::vector<KvMove> moves;
  // H2O: >= 0 = the worker accumulates this sequence's attention mass per cache index (over
  // heads, layers and queries) and, when it samples, reports in SeqResult::victims the
  // h2o_victims cache indices of least mass among those not holding one of the h2o_recent most
  // recent positions. -1 = off.
  int32_t h2o_recent = -1;
  int32_t h2o_victims = 0;
  // Score this chunk (SamplingParams::prompt_logprobs > 0 alternatives): the worker returns, for
  // each computed position p whose next token is known (tokens[i + 1], or next_token after the
  // last one), the log-probability of that next token from p's logits (StepResult::prompt_logprobs).
  bool prompt_logprobs = false;
  int32_t next_token = -1;  // the prompt token after this chunk (-1: none, e.g. the last chunk)
  // CacheBlend: non-empty = this chunk [start_pos, start_pos + tokens) of the prompt is prefilled
  // by reusing the chunks' cached K/V with selective recompute (worker capability "chunk_blend");
  // a prompt longer than a step's budget is blended over several such chunks, each over the K/V
  // the earlier ones left. blend_head holds the sequence's tokens [0, start_pos) (already in the
  // pages); blend_chunks are positions in the whole sequence, from its first document to the last
  // one this chunk reaches; blend_tail = the tokens after this chunk up to the end of that last
  // document when the chunk ends inside it (empty otherwise; never with sample);
  // blend_ratio < 0 = the worker's default recompute ratio. All omitted from the wire when empty.
  // blend_head_from > 0 (only to workers with capability "blend_steps"): the head leaves out the
  // tokens [blend_chunks[0].begin, blend_head_from), which no lookup of this step reads (they lie
  // between the anchor and the document this chunk continues, or its start); blend_head then holds
  // [0, blend_chunks[0].begin) followed by [blend_head_from, start_pos). 0 = the whole head.
  std::vector<BlendChunk> blend_chunks{};
  std::vector<int32_t> blend_head{};
  std::vector<int32_t> blend_tail{};
  int32_t blend_head_from = 0;
  float blend_ratio = -1.0f;
  uint64_t blend_salt = 0;  // the request's K/V namespace (tenant, cache_salt): chunk K/V are shared only within it
};

// Copy page src to page dst in every layer (copy-on-write of a shared partial page).
struct PageCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

// Fill pages from a kvstore blob (preference K/V injection): positions [0, num_tokens) of the
// blob go to `pages` in order; V is scaled by alpha, K never.
struct KvFill {
  uint64_t request_id = 0;
  std::string blob_key;        // kvstore key (fingerprint, user, content hash), opaque here
  std::vector<int32_t> pages;  // destination pages, ceil(num_tokens / page_size) of them
  int32_t num_tokens = 0;
  float alpha = 1.0f;
  // The preference's token ids (num_tokens of them), so that a worker can prefill it at
  // positions [0, num_tokens) on a kvstore miss; empty when the sender has none (a miss is then
  // an error). Appended last so positional initializers of the fields above stay valid.
  std::vector<int32_t> tokens{};
};

// 96 bits of the SHA-256 chain over a K/V page's namespace key and every token of its prefix
// (tessera/common/kv_digest.h). All zero: none (a peer that predates tags; never matches).
using KvTag = std::array<uint8_t, 12>;

// K/V offload (docs/kv.md "K/V offload to the kvstore"). A page the scheduler has just evicted
// from its radix index, to be read by the worker before anything of the plan writes a page and
// put (encoded) to the kvstore under its block hash (RadixIndex: the hash names the model,
// namespace and every token of the prefix up to and including this page). ns_hash is the
// namespace's hash, the kvstore partition the blob goes to. `tag` is stored inside the blob and
// proves, on a reload, which prefix the K/V belong to (the 64-bit hashes can collide).
struct KvSpill {
  int32_t page = 0;
  uint64_t hash = 0;
  uint64_t ns_hash = 0;
  KvTag tag{};
};

// Reload consecutive pages of one request's prefix from the kvstore: pages[i] gets the blob of
// block hash hashes[i], used only when the tag inside the blob equals tags[i]. The worker loads
// the leading pages it finds and stops at the first it cannot use (miss, other model/dtype/codec,
// other tag, kvstore down): ReloadResult::pages says how many.
struct KvReload {
  uint64_t request_id = 0;
  uint64_t ns_hash = 0;
  std::vector<int32_t> pages;
  std::vector<uint64_t> hashes;  // same length as pages
  std::vector<KvTag> tags{};     // same length as pages (empty from a peer that predates tags: nothing loads)
};

struct StepPlan {
  uint64_t step_id = 0;
  std::vector<PageCopy> copies;   // applied first (after spills)
  std::vector<KvFill> fills;      // applied second (after reloads)
  std::vector<SeqPlan> seqs;      // computed third, as one ragged batch
  std::vector<uint64_t> released; // requests finished or cancelled: the worker drops their state
  // K/V offload: spills are read before anything else of the plan (copies, reloads, fills and the
  // forward may write into the evicted pages); reloads are applied after the copies. Both are
  // omitted from the wire when empty and need the worker capability "kv_offload".
  std::vector<KvSpill> spills{};
  std::vector<KvReload> reloads{};
};

// What one KvReload loaded: its first `pages` pages (0 = nothing; the scheduler recomputes the rest).
struct ReloadResult {
  uint64_t request_id = 0;
  int32_t pages = 0;
  int64_t kv_bytes = 0;      // encoded blob bytes fetched for those pages
  double transfer_ms = 0.0;  // kvstore gets + decode + writes into the pool
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SeqResult {
  uint64_t request_id = 0;
  int32_t token = -1;                 // sampled token (when the plan asked to sample)
  float logprob = 0.0f;               // of `token`, when requested
  std::vector<TokenLogprob> top;      // top alternatives, most likely first, when requested
  std::vector<int32_t> victims;       // H2O: cache indices to evict next, least mass first (SeqPlan::h2o_victims)
  int32_t reused_tokens = 0;          // CacheBlend: prompt tokens of this step whose K/V came from cached chunk K/V (hits)
};

// Provenance of one applied KvFill (DKI): where the preference K/V came from and what it cost;
// the request's `usage` and the metrics report these figures.
struct FillResult {
  uint64_t request_id = 0;
  std::string source;        // "kvstore" (kvstore L1), "redis" (kvstore L2), "compute" (prefilled)
  int64_t kv_bytes = 0;      // encoded blob bytes fetched (hit), or unscaled K/V bytes computed
  double transfer_ms = 0.0;  // hit: kvstore get + decode + copy into pages; compute: 0
  double compute_ms = 0.0;   // compute: prefill of the preference; hit: 0
};

// The scored positions of one SeqPlan with prompt_logprobs: logprobs[i] is the log-probability
// of the token at position first_pos + i given positions [0, first_pos + i) (raw model
// distribution: no temperature, penalties or logit_bias); top[i] its alternatives, most likely first.
struct PromptLogprobs {
  uint64_t request_id = 0;
  int32_t first_pos = 0;  // the SeqPlan's start_pos + 1
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
};

struct StepResult {
  uint64_t step_id = 0;
  std::vector<SeqResult> results;  // one per SeqPlan with sample == true, in plan order
  ErrorCode error_code = ErrorCode::kOk;  // kOk, or the step was not applied (an int32 on the wire)
  std::string error_message;
  double compute_ms = 0.0;
  std::vector<FillResult> fills;   // one per KvFill of the plan, in plan order
  std::vector<PromptLogprobs> prompt_logprobs;  // one per SeqPlan with prompt_logprobs, in plan order
  // K/V offload: one per KvReload of the plan, in plan order; and the block hashes whose spill
  // (of this or an earlier plan) reached the kvstore since the previous result.
  std::vector<ReloadResult> reloads{};
  std::vector<uint64_t> offloaded{};
};

}  // namespace tessera
