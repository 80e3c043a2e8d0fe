// Protocol v1: the messages every Tessera process (and any foreign client) exchanges, and
// their msgpack codec. docs/protocol.md is the human contract for these structs; keep the two
// in step.
//
// Framing (see zmq_util.h): one message = one msgpack map in the last frame of a ZeroMQ
// multipart message; ROUTER sockets see the peer identity (and, for REQ-style peers, an empty
// delimiter) in front of it. Every map carries `v` (= kProtocolVersion), `type` (a string
// naming the message) and `id` (uint64: request id or correlation id). Unknown keys are
// ignored; missing optional keys take the defaults written below.
//
// Error policy: decode() never throws and never aborts on any byte sequence. It returns
// kMalformedMessage for bytes that are not one msgpack map, kProtocolMismatch for a wrong `v`,
// kInvalidArgument for a missing or wrongly-typed field, kOutOfRange for a number outside
// its range; the message names the field ("max_tokens must be >= 1 (got 0)").
//
// Thread-safety: all functions are pure; the structs are plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"

namespace tessera::protocol {

inline constexpr int32_t kProtocolVersion = 1;

// Upper bounds checked by validation; a service may configure tighter limits of its own.
inline constexpr int32_t kMaxTopLogprobs = 20;  // also bounds prompt_logprobs
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopTokenIds = 256;
inline constexpr size_t kMaxMessageBytes = 64u << 20;  // whole encoded message

// ---- Client <-> frontend, frontend <-> scheduler -------------------------------------------

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant"
  std::string content;
};

enum class RequestKind : uint8_t { kCompletion, kChat };

// type "completion" or "chat". A client sends prompt text (or token ids) or chat messages; the
// frontend forwards to a scheduler the same message with `prompt_tokens` filled (tokenized,
// chat template applied) and `preference_tokens` filled when a preference is given.
// Identity fields' limits (checked by the frontend and again by the scheduler's intake).
inline constexpr size_t kMaxTenantBytes = 128;
inline constexpr size_t kMaxCacheSaltBytes = 256;

struct GenerateRequest {
  uint64_t id = 0;
  RequestKind kind = RequestKind::kCompletion;
  std::string model;                       // "" = the served model
  std::string prompt;                      // completion: text
  std::vector<int32_t> prompt_tokens;      // completion: token ids (wins over `prompt` when non-empty)
  std::vector<ChatMessage> messages;       // chat
  SamplingParams sampling;
  int32_t max_tokens = 16;                 // >= 1
  std::vector<std::string> stop;           // stop strings (<= kMaxStopStrings), never emitted
  std::vector<int32_t> stop_token_ids;     // extra stop tokens besides EOS
  bool ignore_eos = false;
  bool stream = true;                      // ZMQ API: token events as they come, else one final
  std::string user;                        // end-user id (preference namespace)
  std::string preference;                  // preference text to inject (DKI)
  std::vector<int32_t> preference_tokens;  // filled by the frontend
  float preference_alpha = 0.5f;           // [0, 1]; effective alpha = min(alpha, 0.7)
  int32_t priority = 0;                    // [-100, 100]; higher runs first
  std::string routing_key;                 // consistent-hash key; "" = user, else the prompt prefix
  // Identity (docs/api.md "Authentication and tenants"). Each is on the wire only when non-empty.
  std::string api_key;                     // client -> frontend (ZeroMQ API); never forwarded
  std::string tenant;                      // frontend -> scheduler: the key's tenant ("" = "default")
  std::string cache_salt;                  // prefix-cache isolation inside a tenant (vLLM's field)
  // K/V retention (docs/kv.md); on the wire as a map only when type != none.
  KvPolicy kv_policy;
  // CacheBlend (docs/api.md "Reusable documents"), each on the wire only when non-empty/set:
  // client -> frontend: the documents that precede the prompt / the last user message, each
  // tokenized on its own; frontend -> scheduler: where they are in prompt_tokens (in order,
  // disjoint) and the recompute ratio in [0, 1] (< 0: the worker's default).
  std::vector<std::string> documents{};
  std::vector<BlendChunk> blend_chunks{};
  float recompute_ratio = -1.0f;
};

// type "cancel": stop request `id`, free its pages. Answered by a "final" with
// finish_reason "cancelled" (or nothing if the id is unknown/finished).
struct CancelRequest {
  uint64_t id = 0;
};

// type "token": new tokens of request `id`. Scheduler -> frontend carries only `tokens`
// (+ logprobs); frontend -> client also carries `text` (the UTF-8-safe text delta after stop
// string handling). logprobs/top_logprobs are parallel to `tokens` when requested, and omitted
// from the wire when empty.
struct TokenEvent {
  uint64_t id = 0;
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  // Prompt log-probabilities (sampling.prompt_logprobs >= 0): scheduler -> frontend in one event
  // with no `tokens`, before the first token. prompt_logprobs[i] is that of prompt token i + 1
  // (the first prompt token has none); prompt_top_logprobs parallel to it when alternatives were
  // asked. Omitted from the wire when empty.
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
  int32_t reused_tokens = 0;  // CacheBlend: prompt tokens whose K/V came from cached document K/V
  // Preference K/V injection (DKI; docs/preference.md): where the preference K/V came from —
  // "" (no preference), "memory" (pages cached under the user's namespace), "kvstore" (kvstore
  // L1), "redis" (kvstore L2), "compute" (prefilled) — with the K/V bytes moved or computed and
  // the kvstore transfer time (get + decode + copy into pages).
  std::string preference_source{};
  int64_t preference_kv_bytes{};
  double preference_transfer_ms{};
};

struct Timings {
  double queue_ms = 0.0;   // admission wait
  double ttft_ms = 0.0;    // arrival -> first token
  double decode_ms = 0.0;  // first token -> last token
  double total_ms = 0.0;   // arrival -> final
};

// type "final": the last message of a successful (or cancelled) request.
// finish_reason: "stop" (EOS, stop token or stop string), "length" (max_tokens or context),
// "cancelled".
struct FinalEvent {
  uint64_t id = 0;
  std::string finish_reason = "stop";
  std::string text;                 // frontend -> client: the full text when stream == false
  std::vector<int32_t> tokens;      // frontend -> client when stream == false
  // frontend -> client when stream == false and logprobs were asked: parallel to `tokens`
  // (omitted from the wire when empty).
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  // frontend -> client when stream == false and prompt_logprobs was asked (as in TokenEvent).
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
  Usage usage;
  Timings timings;
};

// type "error": the request `id` (0 when it could not be read) failed; no more events follow.
struct ErrorEvent {
  uint64_t id = 0;
  ErrorCode code = ErrorCode::kInternal;  // numeric on the wire (`code`), name in `error`
  std::string message;
};

// ---- Scheduler <-> worker ------------------------------------------------------------------

// type "register": worker -> scheduler, first message after connecting.
struct RegisterWorker {
  uint64_t id = 0;                        // correlation id
  std::string worker_name;                // unique per scheduler, e.g. "host:rank0"
  std::vector<std::string> capabilities;  // e.g. "cpu", "cuda", "kv_fill", "logprobs"
  uint64_t model_fingerprint = 0;
  int32_t num_pages = 0;        // >= 1
  int32_t page_size = 16;       // >= 1
  int32_t max_batch_tokens = 0; // >= 1
  int32_t max_seq_len = 0;      // >= 1
  int32_t vocab_size = 0;       // >= 1
  int32_t eos_id = -1;
};

// type "register_ack": scheduler -> worker.
struct RegisterAck {
  uint64_t id = 0;
  bool accepted = true;
  std::string reason;             // when !accepted
  int32_t heartbeat_ms = 1000;    // heartbeat interval to use (>= 1)
  // The scheduler process's instance id: random, non-zero, fixed for the life of the process
  // (optional on the wire; 0 = absent, an old peer). A change means the scheduler restarted.
  uint64_t instance = 0;
};

// type "step_plan" / "step_result": a StepPlan / StepResult (step_plan.h), id = step_id.
struct StepPlanMsg {
  uint64_t id = 0;
  StepPlan plan;
};
struct StepResultMsg {
  uint64_t id = 0;
  StepResult result;
};

// type "heartbeat": sent every heartbeat_ms by each side of a link (frontend -> scheduler,
// worker -> scheduler); the receiver answers with its own heartbeat with the same `id`.
// A peer silent for 3 intervals is dead.
// One worker's figures in a scheduler's heartbeat (optional; absent from other roles' beats).
// Pages: free + held + cached = the worker's pool (docs/protocol.md, "Heartbeats and failure").
struct WorkerStats {
  std::string name;
  int32_t free_pages = 0;
  int32_t held_pages = 0;     // referenced by running sequences
  int32_t cached_pages = 0;   // in the radix index, evictable
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t prompt_tokens = 0;         // prompt tokens of requests admitted on this worker (cumulative)
  int64_t cached_prompt_tokens = 0;  // of which came from its prefix cache
};

// A scheduler's cumulative figures since it started (optional, scheduler heartbeats only; the
// frontend's dashboard turns them into rates, docs/operations.md "Dashboard").
struct SchedulerTotals {
  int64_t finished_requests = 0;     // requests ended (any reason)
  int64_t prompt_tokens = 0;         // of ended requests
  int64_t cached_prompt_tokens = 0;  // of ended requests, from the prefix cache
  int64_t generation_tokens = 0;     // tokens sent to frontends
  int64_t preemptions = 0;
  int64_t ttft_count = 0;            // requests that got a first token
  double ttft_seconds_sum = 0.0;     // their arrival -> first token times, summed
};

struct Heartbeat {
  uint64_t id = 0;            // sender's sequence number
  std::string role;           // "frontend" | "scheduler" | "worker"
  std::string name;
  int32_t live_workers = 0;   // scheduler: workers answering heartbeats
  int32_t running = 0;        // requests running
  int32_t waiting = 0;        // requests queued
  int32_t free_pages = 0;
  int64_t unix_ms = 0;        // sender's clock, informational
  std::vector<WorkerStats> workers;  // scheduler: one entry per live worker (optional)
  // Scheduler: its instance id (see RegisterAck::instance); 0 = absent (other roles, old peers).
  // A receiver that saw another non-zero instance from the same peer knows the peer restarted
  // and fails what it had in flight there (docs/protocol.md, "Heartbeats and failure").
  uint64_t instance = 0;
  // Scheduler -> frontend: true once the scheduler is draining (it got SIGTERM): it takes no new
  // request (a new one is refused with peer_dead, which the frontends submit elsewhere) and ends
  // its running ones before it exits. Optional: false = absent from the wire (older peers).
  bool draining = false;
  // Limits (optional; 0 / "" = absent, omitted from the wire). Scheduler -> frontend:
  // context_length and page_size of its workers. Frontend -> client (the answer to a client's
  // heartbeat, docs/protocol.md "Limits"): all of them; `name` is the served model.
  std::string model;              // frontend -> client: the served model
  int32_t protocol_version = 0;
  int32_t context_length = 0;     // longest sequence (prompt + completion) in tokens
  int32_t page_size = 0;          // tokens per K/V page (cached_tokens counts whole pages)
  int32_t max_prompt_tokens = 0;  // the frontend's prompt limit
  int32_t vocab_size = 0;
  int32_t default_max_tokens = 0; // max_tokens of a request that gives none
  std::optional<SchedulerTotals> totals{};  // scheduler -> frontend (optional)
};

// type "drain": stop admitting new requests, finish running ones. type "shutdown": exit.
struct Drain {
  uint64_t id = 0;
};
struct Shutdown {
  uint64_t id = 0;
};

// type "invalidate_user": frontend -> scheduler (admin invalidate, docs/api.md). The scheduler
// stops reusing the preference K/V pages it caches under `user`'s namespaces: later requests of
// that user fill their preference again (from the kvstore, else by computing it). No reply.
struct InvalidateUser {
  uint64_t id = 0;
  std::string user;  // non-empty
};

// type "prefix_admin": frontend -> scheduler (the admin API's pinned prefixes, docs/api.md
// "Pinned prefixes"). Answered by one "prefix_report", or an "error" when nothing could be done.
inline constexpr int32_t kMaxPrefixListLimit = 1000;
struct PrefixAdmin {
  uint64_t id = 0;
  std::string op;                      // "pin" | "unpin" | "list"
  std::vector<int32_t> prompt_tokens;  // pin: the prefix (a whole number of pages is pinned)
  std::string routing_key;             // pin: as a request's (routes it to the worker its requests go to)
  std::string tenant;                  // pin: the namespace, as a request's
  std::string cache_salt;
  // pin: [] = the worker its routing key picks, ["*"] = every live worker, else these workers;
  // unpin: [] or ["*"] = every worker, else these.
  std::vector<std::string> workers;
  uint64_t prefix = 0;                 // unpin: the pin's hash (PrefixEntry::hash)
  int32_t limit = 0;                   // list: also the `limit` most hit cached prefixes per worker, [0, kMaxPrefixListLimit]
};

// One prefix on one worker, in a "prefix_report".
struct PrefixEntry {
  std::string worker;
  uint64_t hash = 0;      // block hash of the prefix's last page (the pin's name)
  uint64_t ns_hash = 0;   // its namespace's hash (radix_index.h)
  int32_t tokens = 0;
  int32_t pages = 0;      // pinned: all its pages; cached: the pages of its radix node's own edge
  int64_t hits = 0;       // cached: prefix-cache matches that covered it (0 for a pin entry)
  bool pinned = false;
  std::string error;      // pin/unpin on this worker failed: why ("" = done)
};

// type "prefix_report": scheduler -> frontend, the answer to a "prefix_admin".
struct PrefixReport {
  uint64_t id = 0;
  std::string scheduler;              // the scheduler's name
  std::vector<PrefixEntry> entries;   // pin/unpin: one per worker acted on; list: pins, then cached prefixes
  int32_t pinned_pages = 0;           // over this scheduler's workers, after the operation
  int32_t pin_budget_pages = 0;       // the same workers' budgets, summed
};

using Message = std::variant<GenerateRequest, CancelRequest, TokenEvent, FinalEvent, ErrorEvent,
                             RegisterWorker, RegisterAck, StepPlanMsg, StepResultMsg, Heartbeat,
                             Drain, Shutdown, InvalidateUser, PrefixAdmin, PrefixReport>;

// The `type` string of a message ("completion", "chat", "cancel", "token", "final", "error",
// "register", "register_ack", "step_plan", "step_result", "heartbeat", "drain", "shutdown",
// "invalidate_user", "prefix_admin", "prefix_report").
std::string_view message_type(const Message& m);
uint64_t message_id(const Message& m);

// Encodes to one msgpack map (all fields written, `v`/`type`/`id` first).
std::string encode(const Message& m);
// Decodes and validates (validate() below for requests and plans). Never throws.
Result<Message> decode(std::string_view bytes);
// Best effort: the `id` of a message that failed to decode, so the error can be correlated.
uint64_t peek_id(std::string_view bytes);
// Whether the message map has `key` with a non-nil value (tells "absent" from the default).
bool peek_has_key(std::string_view bytes, std::string_view key);

// Range checks on a request (also applied by decode(); the HTTP layer calls it too).
Status validate(const GenerateRequest& r);
Status validate(const SamplingParams& s);
// Structural checks on a plan that need no pool knowledge (slot/page consistency is the worker's).
Status validate(const StepPlan& p);

// Encodes an error reply for a request id.
std::string encode_error(uint64_t id, ErrorCode code, std::string message);

}  // namespace tessera::protocol
