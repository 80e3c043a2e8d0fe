// The OpenAI response side (openai.h): HTTP status and error bodies, completion and chat
// responses, usage / timings / logprobs objects, the models list, ids. Parsing requests is
// openai.cpp.
#include <cstdio>
#include <random>
#include <nlohmann/json.hpp>

#include "tessera/common/hash.h"
#include "tessera/frontend/openai.h"

namespace tessera::frontend {

using json = nlohmann::json;
using protocol::RequestKind;

int http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kTooLarge: return 413;
    case ErrorCode::kOverloaded:
    case ErrorCode::kResourceExhausted: return 429;
    case ErrorCode::kUnavailable:
    case ErrorCode::kPeerDead: return 503;
    case ErrorCode::kDeadlineExceeded: return 504;
    case ErrorCode::kPermissionDenied: return 403;
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kMalformedMessage:
    case ErrorCode::kUnsupported:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kProtocolMismatch: return 400;
    default: return 500;
  }
}

std::string error_json(const Error& error, std::string_view param, std::string_view code, int status) {
  if (status == 0) status = http_status(error.code);
  const char* type = status == 400 || status == 413 ? "invalid_request_error"
                     : status == 401                ? "authentication_error"
                     : status == 403                ? "permission_error"
                     : status == 404                ? "not_found_error"
                     : status == 408                ? "timeout_error"
                     : status == 429                ? "rate_limit_error"
                     : status == 503                ? "service_unavailable"
                     : status == 504                ? "timeout_error"
                                                    : "server_error";
  json j = {{"error",
             {{"message", error.message},
              {"type", type},
              {"param", param.empty() ? json(nullptr) : json(std::string(param))},
              {"code", code.empty() ? std::string(error_code_name(error.code)) : std::string(code)}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

json usage_json(const protocol::FinalEvent& f) {
  json u = {{"prompt_tokens", f.usage.prompt_tokens},
            {"completion_tokens", f.usage.completion_tokens},
            {"total_tokens", f.usage.prompt_tokens + f.usage.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", f.usage.cached_tokens}}}};
  // CacheBlend: prompt tokens whose K/V came from cached document K/V (docs/api.md "Reusable documents").
  if (f.usage.reused_tokens > 0) u["prompt_tokens_details"]["reused_tokens"] = f.usage.reused_tokens;
  // DKI: only when a preference was injected (docs/api.md "Preference injection").
  if (!f.usage.preference_source.empty())
    u["preference"] = {{"source", f.usage.preference_source},
                       {"kv_bytes", f.usage.preference_kv_bytes},
                       {"transfer_ms", f.usage.preference_transfer_ms}};
  return u;
}

json timings_json(const protocol::FinalEvent& f) {
  return {{"queue_ms", f.timings.queue_ms}, {"ttft_ms", f.timings.ttft_ms}, {"decode_ms", f.timings.decode_ms},
          {"total_ms", f.timings.total_ms}};
}

json logprobs_json(RequestKind kind, const std::vector<TokenLogprobText>& lps) {
  if (kind == RequestKind::kChat) {
    json content = json::array();
    for (const auto& t : lps) {
      json top = json::array();
      for (const auto& [s, lp] : t.top) top.push_back({{"token", s}, {"logprob", lp}});
      content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  int32_t running = 0;
  for (const auto& t : lps) {
    tokens.push_back(t.token);
    const int32_t offset = t.text_offset >= 0 ? t.text_offset : running;
    offsets.push_back(offset);
    running = offset + code_points(t.token);
    if (!t.has_logprob) {  // the first prompt token (echo): nothing comes before it
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(t.logprob);
    json m = json::object();
    for (const auto& [s, lp] : t.top) m[s] = lp;
    top.push_back(m);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }


}  // namespace

std::string response_json(const ResponseMeta& meta, const std::vector<ChoiceOut>& choices, const protocol::FinalEvent& final_event) {
  json out = json::array();
  for (const ChoiceOut& c : choices) {
    json choice = {{"index", c.index}, {"finish_reason", c.finish_reason}};
    choice["logprobs"] = meta.logprobs ? logprobs_json(meta.kind, c.logprobs) : json(nullptr);
    if (meta.kind == RequestKind::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = tool_calls_json(c.tool_calls, false);
      }
    }
    else choice["text"] = c.text;
    out.push_back(std::move(choice));
  }
  json j = {{"id", meta.id},
            {"object", meta.kind == RequestKind::kChat ? "chat.completion" : "text_completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", std::move(out)},
            {"usage", usage_json(final_event)},
            {"timings", timings_json(final_event)}};
  return dump(j);
}

std::string response_json(const ResponseMeta& meta, const std::string& text, const std::vector<TokenLogprobText>& logprobs,
                          const protocol::FinalEvent& final_event, std::string_view finish_reason) {
  return response_json(meta, {ChoiceOut{0, text, logprobs, std::string(finish_reason)}}, final_event);
}

std::string stream_chunk(const ResponseMeta& meta, const std::string& text, const std::vector<TokenLogprobText>& logprobs,
                         bool first, std::string_view finish_reason, const protocol::FinalEvent* final_event, int32_t index) {
  json choice = {{"index", index}};
  choice["finish_reason"] = finish_reason.empty() ? json(nullptr) : json(std::string(finish_reason));
  choice["logprobs"] = meta.logprobs && !logprobs.empty() ? logprobs_json(meta.kind, logprobs) : json(nullptr);
  if (meta.kind == RequestKind::kChat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || finish_reason.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  json j = {{"id", meta.id},
            {"object", meta.kind == RequestKind::kChat ? "chat.completion.chunk" : "text_completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", json::array({choice})}};
  if (final_event != nullptr) {
    if (meta.stream_usage == StreamUsage::kLastChunk) j["usage"] = usage_json(*final_event);
    j["timings"] = timings_json(*final_event);
  }
  return "data: " + dump(j) + "\n\n";
}

std::string usage_chunk(const ResponseMeta& meta, const protocol::FinalEvent& final_event) {
  json j = {{"id", meta.id},
            {"object", meta.kind == RequestKind::kChat ? "chat.completion.chunk" : "text_completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", json::array()},
            {"usage", usage_json(final_event)}};
  return "data: " + dump(j) + "\n\n";
}

namespace {
json model_object(const std::string& model, int64_t created, int32_t max_model_len) {
  json m = {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "tessera"}};
  if (max_model_len > 0) m["max_model_len"] = max_model_len;
  return m;
}
}  // namespace

std::string models_json(const std::string& model, int64_t created, int32_t max_model_len) {
  json j = {{"object", "list"}, {"data", json::array({model_object(model, created, max_model_len)})}};
  return dump(j);
}

std::string model_json(const std::string& model, int64_t created, int32_t max_model_len) {
  return dump(model_object(model, created, max_model_len));
}

int32_t code_points(std::string_view text) {
  int32_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80 ? 1 : 0;  // every byte but UTF-8 continuation bytes
  return n;
}

uint64_t candidate_seed(uint64_t seed, int32_t candidate) {
  return candidate == 0 ? seed : hash_combine(seed, static_cast<uint64_t>(candidate));
}

std::string random_hex_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[25];
  std::snprintf(buf, sizeof buf, "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return buf;
}

}  // namespace tessera::frontend
