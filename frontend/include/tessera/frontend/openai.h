// The OpenAI-compatible HTTP schema: request JSON -> protocol::GenerateRequest, and the JSON of
// responses, stream chunks, errors and /v1/models. docs/api.md documents every field.
//
// Parsing returns a Result whose Error says what is wrong; `bad_param` receives the JSON field
// at fault (the "param" of the error body). Wrong types and malformed JSON are
// kInvalidArgument / kMalformedMessage (HTTP 400); ranges are checked by protocol::validate().
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/common/protocol.h"
#include "tessera/frontend/tool_calls.h"

namespace tessera::frontend {

struct ParseOptions {
  int32_t default_max_tokens = 256;  // when the request gives none
};

// Limits of a request that fans out into several sequences (docs/api.md "Several choices").
inline constexpr int32_t kMaxChoices = 16;     // n and best_of: each in [1, 16]
inline constexpr int32_t kMaxPrompts = 64;     // entries of a list `prompt`
inline constexpr int32_t kMaxSequences = 64;   // prompts x best_of
inline constexpr size_t kMaxDocumentBytes = 256 * 1024;  // one entry of `documents` (CacheBlend)

// One prompt of a completions request: text, or token ids (non-empty) when given as ids.
struct PromptInput {
  std::string text;
  std::vector<int32_t> tokens;
};

struct ParsedRequest {
  protocol::GenerateRequest request;  // completions: prompt/prompt_tokens of prompts[0]
  bool logprobs = false;  // client asked for logprobs (completions: `logprobs: n`; chat: `logprobs: true`)
  bool max_tokens_given = false;  // false: request.max_tokens is the default (PrepareOptions)
  bool kv_policy_given = false;   // false: the frontend's --kv-policy applies (PrepareOptions)
  bool seed_given = false;        // false: the request preparer draws a random seed
  bool include_usage = false;     // stream_options.include_usage
  // Several choices (completions and chat: n; completions only: best_of, echo, a prompt list).
  int32_t n = 1;                   // choices returned per prompt
  int32_t best_of = 1;             // candidates generated per prompt (>= n; > n only without stream)
  bool echo = false;               // completions: each choice's text starts with its prompt
  std::vector<PromptInput> prompts;  // completions: one per prompt (>= 1); chat: empty
  // chat: tools / tool_choice / parallel_tool_calls and each message's tool fields (tool_calls.h);
  // a forced call has set request.sampling.grammar.
  ToolSet tools;
};

// The seed of candidate `candidate` of a request whose seed is `seed`: candidate 0 keeps it (so
// n = 1 is unchanged), the others get a mix of both (so choices differ, reproducibly).
uint64_t candidate_seed(uint64_t seed, int32_t candidate);

// Arrays/objects a request body may nest inside each other (docs/api.md "Limits"): deeper bodies
// are refused before they are parsed (values are dumped and walked recursively).
inline constexpr int kMaxBodyJsonDepth = 512;
// kInvalidArgument naming the limit when `body` nests deeper than kMaxBodyJsonDepth.
Status check_body_depth(std::string_view body);

// POST /v1/completions (kind = kCompletion) or /v1/chat/completions (kind = kChat).
Result<ParsedRequest> parse_request(std::string_view body, protocol::RequestKind kind, const ParseOptions& options,
                                    std::string* bad_param);

// HTTP status of an error code: 1xx input -> 400 (kNotFound 404, kTooLarge 413),
// kOverloaded/kResourceExhausted 429, kUnavailable/kPeerDead 503, kDeadlineExceeded 504, else 500.
int http_status(ErrorCode code);
// {"error": {"message", "type", "param", "code"}}; `code` "" = the error code's name; `status`
// 0 = http_status(error.code) (the type follows the status: 401 authentication_error, 403
// permission_error, ...).
std::string error_json(const Error& error, std::string_view param = "", std::string_view code = "", int status = 0);

struct TokenLogprobText {
  std::string token;  // the token's text (may be a partial UTF-8 sequence, sent as-is)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
  // Completions' text_offset: where the token's text starts in the choice's text, in code
  // points; -1 = right after the previous entry's token (0 for the first).
  int32_t text_offset = -1;
  bool has_logprob = true;  // false: the first prompt token of an echo (logprob and top are null)
};

// Unicode code points of UTF-8 text (bytes that are not continuation bytes).
int32_t code_points(std::string_view text);

// Where a stream carries `usage`: kLastChunk (with the finish_reason chunk), kSeparateChunk
// (OpenAI's stream_options.include_usage: an extra chunk with `choices: []`), kNone.
enum class StreamUsage : uint8_t { kLastChunk, kSeparateChunk, kNone };

struct ResponseMeta {
  protocol::RequestKind kind = protocol::RequestKind::kCompletion;
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  std::string model;
  int64_t created = 0;  // unix seconds
  bool logprobs = false;
  StreamUsage stream_usage = StreamUsage::kLastChunk;
};

// Whole (non-streamed) response.
std::string response_json(const ResponseMeta& meta, const std::string& text, const std::vector<TokenLogprobText>& logprobs,
                          const protocol::FinalEvent& final_event, std::string_view finish_reason);
// One choice of a response with several (n, best_of, a prompt list): `index` as OpenAI numbers
// them (prompt_index * n + i).
struct ChoiceOut {
  int32_t index = 0;
  std::string text;
  std::vector<TokenLogprobText> logprobs;
  std::string finish_reason;
  std::vector<ToolCall> tool_calls;  // chat: message.tool_calls (content null when `text` is empty)
};
// Whole response with these choices; `final_event` gives usage (summed by the caller) and timings.
std::string response_json(const ResponseMeta& meta, const std::vector<ChoiceOut>& choices, const protocol::FinalEvent& final_event);
// One server-sent event "data: {...}\n\n" for choice `index`. finish_reason empty = not the last chunk; the last
// chunk carries `usage` and `timings` too. first: chat chunks announce the assistant role.
std::string stream_chunk(const ResponseMeta& meta, const std::string& text, const std::vector<TokenLogprobText>& logprobs,
                         bool first, std::string_view finish_reason, const protocol::FinalEvent* final_event, int32_t index = 0);
// A streamed chat choice's tool calls: one chunk carrying every call whole (index, id, type,
// function.name, function.arguments), with `content` first when non-empty.
std::string tool_calls_chunk(const ResponseMeta& meta, const std::string& content, const std::vector<ToolCall>& calls, bool first,
                             std::string_view finish_reason, const protocol::FinalEvent* final_event, int32_t index = 0);
// One chat chunk whose delta carries a piece of call 0's arguments (OpenAI's
// delta.tool_calls[0].function.arguments): a forced call streamed as it is generated;
// `header` (the first piece): also the call's id, type and name.
std::string tool_call_delta_chunk(const ResponseMeta& meta, const ToolCall* header, std::string_view arguments, bool first,
                                  std::string_view finish_reason, const protocol::FinalEvent* final_event, int32_t index = 0);
// OpenAI's usage chunk: "data: {..., "choices": [], "usage": {...}}\n\n".
std::string usage_chunk(const ResponseMeta& meta, const protocol::FinalEvent& final_event);
// /v1/models and /v1/models/{id}; max_model_len = the context length (omitted when 0: unknown).
std::string models_json(const std::string& model, int64_t created, int32_t max_model_len = 0);
std::string model_json(const std::string& model, int64_t created, int32_t max_model_len);
// 24 random hex digits: completion ids ("cmpl-<hex>") and generated x-request-id values.
std::string random_hex_id();

}  // namespace tessera::frontend
