// Requests and results of the Tessera C++ client (docs/protocol.md "Client API"): the same
// concepts and field names as the protocol and the Python/Node clients. Plain values: copy them,
// build them with designated initializers, use them from any thread.
//
//   tessera::client::RequestOptions opts{.max_tokens = 32, .temperature = 0.0, .seed = 7};
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace tessera::client {

// One chat message: role "system" | "user" | "assistant" (a system message may only come first).
struct ChatMessage {
  std::string role;
  std::string content;
};

struct LogitBias {
  int32_t token = 0;
  float bias = 0.0f;  // [-100, 100], added to the token's logit
};

// K/V retention policies, RequestOptions::kv_policy (docs/api.md, docs/kv.md). The defaults are
// the HTTP API's and always sent (the ZeroMQ wire's own defaults are 0), so a request means the
// same over both. Ranges are the frontend's (sinks + window and budget at most the context:
// BadRequest 103 naming kv_policy).
struct StreamingPolicy {  // StreamingLLM: the first `sinks` positions plus the last `window`
  int32_t window = 0;     // >= 1; the request may then generate past the context
  int32_t sinks = 4;      // >= 0
};
struct H2OPolicy {                // H2O: `budget` positions, the `recent` most recent + the most attended
  int32_t budget = 0;             // >= 2
  std::optional<int32_t> recent;  // [0, budget); unset = budget / 2
};
struct FullAttention {};  // no policy, overriding the frontend's --kv-policy
using KvPolicy = std::variant<FullAttention, StreamingPolicy, H2OPolicy>;

// Every request field of the protocol besides the prompt/messages (docs/protocol.md "completion
// and chat"). An unset std::optional (or an empty list) is left off the wire, so the server's
// default applies (e.g. max_tokens: the frontend's --default-max-tokens; seed: random per
// request). Ranges are the server's; a value outside one is refused with a BadRequest naming
// the field. The client picks the request id and sets `stream` itself.
struct RequestOptions {
  std::optional<std::string> model;              // "" = the served model; another name: NotFound
  std::optional<int32_t> max_tokens;             // >= 1
  std::optional<double> temperature;             // [0, 2]; 0 = greedy
  std::optional<double> top_p;                   // (0, 1]
  std::optional<int32_t> top_k;                  // >= 0; 0 = off
  std::optional<double> min_p;                   // [0, 1]
  std::optional<double> repetition_penalty;      // (0, 10]
  std::optional<double> presence_penalty;        // [-2, 2]
  std::optional<double> frequency_penalty;       // [-2, 2]
  std::optional<uint64_t> seed;                  // same seed + request = same tokens
  std::vector<LogitBias> logit_bias;             // <= 1024 entries
  std::optional<bool> logprobs;                  // per-token log-probabilities in the results
  std::optional<int32_t> top_logprobs;           // [0, 20] alternatives per token
  std::vector<std::string> stop;                 // <= 16 stop strings, never part of the text
  std::vector<int32_t> stop_token_ids;           // <= 256 extra stop tokens
  std::optional<bool> ignore_eos;
  std::optional<std::string> user;               // end user: preference namespace, routing key
  std::optional<std::string> preference;         // preference text injected as K/V (needs user)
  std::optional<double> preference_alpha;        // [0, 1]
  std::optional<int32_t> priority;               // [-100, 100]; higher is admitted first
  std::optional<std::string> routing_key;        // consistent-hash key ("" = user, else prefix)
  std::optional<std::string> cache_salt;         // prefix-cache isolation within the tenant
  std::optional<KvPolicy> kv_policy;             // K/V retention (StreamingLLM, H2O); unset = the model's
  std::optional<std::string> api_key;            // overrides ClientOptions::api_key
  // Client-side deadline of this request (overrides ClientOptions::timeout): when it passes the
  // client sends `cancel` (the server frees the request's pages) and the request ends with
  // Timeout (code 203). Not a wire field.
  std::optional<std::chrono::milliseconds> timeout;
};

struct TopLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// One `token` event: new token ids and the text that became visible with them (may be "": bytes
// of an incomplete character, or text held back as a possible stop string). The last event of a
// stream may have no tokens and only held text.
struct TokenEvent {
  uint64_t request_id = 0;
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<float> logprobs;                        // parallel to tokens when asked, else empty
  std::vector<std::vector<TopLogprob>> top_logprobs;  // parallel to tokens when top_logprobs > 0
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens whose K/V came from the prefix cache (whole pages)
  // Preference provenance (docs/api.md "Preference injection"); unset without a preference.
  std::optional<std::string> preference_source;  // "memory" | "kvstore" | "redis" | "compute"
  std::optional<int64_t> preference_kv_bytes;
  std::optional<double> preference_transfer_ms;
};

struct Timings {  // measured by the scheduler
  double queue_ms = 0.0;
  double ttft_ms = 0.0;
  double decode_ms = 0.0;
  double total_ms = 0.0;
};

// The outcome of a completion or chat. For a stream, text/tokens/logprobs are the concatenation
// of its token events, so a streamed and a non-streamed request compare equal.
struct Completion {
  uint64_t request_id = 0;
  std::string text;
  std::vector<int32_t> tokens;
  std::string finish_reason;  // "stop" | "length" | "cancelled"
  Usage usage;
  Timings timings;
  std::optional<std::vector<float>> logprobs;                        // when logprobs was asked
  std::optional<std::vector<std::vector<TopLogprob>>> top_logprobs;  // when top_logprobs > 0
};

// What a stream yields: token events, then its Completion (always the last item).
using StreamEvent = std::variant<TokenEvent, Completion>;

// The served model's limits, from the frontend's heartbeat reply (unset: not reported yet).
struct Limits {
  std::string model;
  int32_t protocol_version = 1;
  std::optional<int32_t> context_length;
  std::optional<int32_t> page_size;
  std::optional<int32_t> max_prompt_tokens;
  std::optional<int32_t> vocab_size;
  std::optional<int32_t> default_max_tokens;
  int32_t live_workers = 0;
  int32_t running = 0;
  int32_t waiting = 0;
  std::string endpoint;  // the frontend that answered
};

}  // namespace tessera::client
