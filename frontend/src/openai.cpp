// The OpenAI request schema: parsing and validating /v1/completions and /v1/chat/completions
// bodies (openai.h). The response side (JSON bodies, SSE chunks, errors) is openai_response.cpp.
#include "tessera/frontend/openai.h"

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <set>
#include <nlohmann/json.hpp>

#include "kv_policy_field.h"
#include "response_format.h"
#include "tessera/common/hash.h"
#include "tessera/common/json_depth.h"

namespace tessera::frontend {
namespace {

using json = nlohmann::json;
using protocol::RequestKind;

const char* json_type(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    default: return "unknown";
  }
}

// Field readers: absent or null leaves the output unchanged.
class Reader {
 public:
  Reader(const json& obj, std::string* bad_param) : obj_(obj), bad_param_(bad_param) {}

  const json* find(const char* key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  Error type_error(const char* key, const char* expected, const json& v) const {
    *bad_param_ = key;
    return make_error(ErrorCode::kInvalidArgument,
                      std::string("'") + key + "' must be " + expected + " (got " + json_type(v) + ")");
  }
  Error fail(const char* key, ErrorCode code, std::string message) const {
    *bad_param_ = key;
    return make_error(code, std::move(message));
  }

  Status str(const char* key, std::string* out) const {
    const json* v = find(key);
    if (!v) return ok_status();
    if (!v->is_string()) return type_error(key, "a string", *v);
    *out = v->get<std::string>();
    return ok_status();
  }
  Status boolean(const char* key, bool* out) const {
    const json* v = find(key);
    if (!v) return ok_status();
    if (!v->is_boolean()) return type_error(key, "a boolean", *v);
    *out = v->get<bool>();
    return ok_status();
  }
  template <class T>
  Status integer(const char* key, T* out) const {
    const json* v = find(key);
    if (!v) return ok_status();
    if (v->is_number_float()) {
      double d = v->get<double>();
      if (std::floor(d) != d) return type_error(key, "an integer", *v);
      if (d < -9.0e18 || d > 9.0e18) return fail(key, ErrorCode::kOutOfRange, std::string("'") + key + "' is out of range");
      return set_int(key, static_cast<int64_t>(d), out);
    }
    if (v->is_number_unsigned()) {
      uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return fail(key, ErrorCode::kOutOfRange, std::string("'") + key + "' is out of range");
      return set_int(key, static_cast<int64_t>(u), out);
    }
    if (v->is_number_integer()) return set_int(key, v->get<int64_t>(), out);
    return type_error(key, "an integer", *v);
  }
  Status number(const char* key, float* out) const {
    const json* v = find(key);
    if (!v) return ok_status();
    if (!v->is_number()) return type_error(key, "a number", *v);
    *out = v->get<float>();
    return ok_status();
  }

 private:
  template <class T>
  Status set_int(const char* key, int64_t x, T* out) const {
    if (x < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        (x > 0 && static_cast<uint64_t>(x) > static_cast<uint64_t>(std::numeric_limits<T>::max())))
      return fail(key, ErrorCode::kOutOfRange, std::string("'") + key + "' is out of range (got " + std::to_string(x) + ")");
    *out = static_cast<T>(x);
    return ok_status();
  }
  const json& obj_;
  std::string* bad_param_;
};

// Chat message content: a string, or an array of {"type": "text", "text": "..."} parts.
Result<std::string> message_content(const json& c, size_t i, std::string* bad_param) {
  const std::string param = "messages[" + std::to_string(i) + "].content";
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {
    std::string out;
    for (const auto& part : c) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
        *bad_param = param;
        return make_error(ErrorCode::kInvalidArgument, param + ": only {\"type\": \"text\", \"text\": ...} parts are supported");
      }
      out += part["text"].get<std::string>();
    }
    return out;
  }
  *bad_param = param;
  return make_error(ErrorCode::kInvalidArgument, param + " must be a string (got " + json_type(c) + ")");
}

// One element of a `prompt` list of token-id lists (element `i`).
Status token_prompt(const json& p, const std::string& at, std::vector<int32_t>* out, std::string* bad_param) {
  *bad_param = "prompt";
  if (p.empty()) return make_error(ErrorCode::kInvalidArgument, "'" + at + "' must not be an empty array");
  for (size_t i = 0; i < p.size(); ++i) {
    if (!p[i].is_number_integer())
      return make_error(ErrorCode::kInvalidArgument, "'" + at + "' must be an array of token ids (element " + std::to_string(i) +
                                                         " is " + json_type(p[i]) + ")");
    const int64_t t = p[i].get<int64_t>();
    if (t < 0 || t > INT32_MAX) return make_error(ErrorCode::kOutOfRange, "prompt token id " + std::to_string(t) + " is out of range");
    out->push_back(static_cast<int32_t>(t));
  }
  bad_param->clear();
  return ok_status();
}

// `prompt`: a string, an array of token ids, an array of strings, or an array of token-id arrays
// (as OpenAI). A list of several prompts runs one request per prompt (ParsedRequest::prompts).
Status parse_prompt(const json& body, ParsedRequest* out, std::string* bad_param) {
  auto it = body.find("prompt");
  auto fail = [&](ErrorCode code, std::string message) -> Status {
    *bad_param = "prompt";
    return make_error(code, std::move(message));
  };
  if (it == body.end() || it->is_null()) return fail(ErrorCode::kInvalidArgument, "'prompt' is required");
  const json& p = *it;
  if (p.is_string()) {
    out->prompts.push_back({p.get<std::string>(), {}});
  } else if (!p.is_array()) {
    return fail(ErrorCode::kInvalidArgument, std::string("'prompt' must be a string, an array of strings, an array of token ids or "
                                                         "an array of token-id arrays (got ") + json_type(p) + ")");
  } else if (p.empty()) {
    return fail(ErrorCode::kInvalidArgument, "'prompt' must not be an empty array");
  } else {
    // One element type throughout: the first element's decides.
    const json& first = p[0];
    const bool ids = first.is_number_integer(), strings = first.is_string(), lists = first.is_array();
    if (!ids && !strings && !lists)
      return fail(ErrorCode::kInvalidArgument, std::string("'prompt' must be a string, an array of strings, an array of token ids or "
                                                           "an array of token-id arrays (prompt[0] is ") + json_type(first) + ")");
    for (size_t i = 1; i < p.size(); ++i) {
      const bool same = ids ? p[i].is_number_integer() : strings ? p[i].is_string() : p[i].is_array();
      if (!same)
        return fail(ErrorCode::kInvalidArgument, "'prompt' mixes element types: prompt[0] is " + std::string(json_type(first)) +
                                                     " but prompt[" + std::to_string(i) + "] is " + json_type(p[i]) +
                                                     " (a prompt list holds only strings or only token-id arrays)");
    }
    if (ids) {
      PromptInput one;
      TS_TRY(token_prompt(p, "prompt", &one.tokens, bad_param));
      out->prompts.push_back(std::move(one));
    } else {
      if (p.size() > static_cast<size_t>(kMaxPrompts))
        return fail(ErrorCode::kOutOfRange, "'prompt' lists " + std::to_string(p.size()) + " prompts; at most " +
                                                std::to_string(kMaxPrompts) + " per request");
      for (size_t i = 0; i < p.size(); ++i) {
        PromptInput one;
        if (strings) one.text = p[i].get<std::string>();
        else TS_TRY(token_prompt(p[i], "prompt[" + std::to_string(i) + "]", &one.tokens, bad_param));
        out->prompts.push_back(std::move(one));
      }
    }
  }
  out->request.prompt = out->prompts.front().text;
  out->request.prompt_tokens = out->prompts.front().tokens;
  return ok_status();
}

Status parse_messages(const json& body, protocol::GenerateRequest* r, std::string* bad_param, ToolSet* tools) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array()) {
    *bad_param = "messages";
    return make_error(ErrorCode::kInvalidArgument, it == body.end() ? "'messages' is required"
                                                                    : std::string("'messages' must be an array (got ") + json_type(*it) + ")");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      *bad_param = at + ".role";
      return make_error(ErrorCode::kInvalidArgument, at + " must be an object with a string 'role'");
    }
    protocol::ChatMessage cm;
    cm.role = m["role"].get<std::string>();
    if (cm.role == "developer") cm.role = "system";  // OpenAI's newer name for the system role
    if (m.contains("content") && !m["content"].is_null()) {
      TS_ASSIGN_OR_RETURN(cm.content, message_content(m["content"], i, bad_param));
    }
    TS_ASSIGN_OR_RETURN(nlohmann::ordered_json extra, message_tool_fields(m, cm.role, at, bad_param));
    if (tools != nullptr) tools->chat.extras.push_back(std::move(extra));
    r->messages.push_back(std::move(cm));
  }
  return ok_status();
}

Status parse_stop(const Reader& rd, const json& body, protocol::GenerateRequest* r) {
  const json* s = rd.find("stop");
  if (!s) return ok_status();
  if (s->is_string()) {
    r->stop.push_back(s->get<std::string>());
    return ok_status();
  }
  if (!s->is_array()) return rd.type_error("stop", "a string or an array of strings", *s);
  for (const auto& x : *s) {
    if (!x.is_string()) return rd.type_error("stop", "a string or an array of strings", x);
    r->stop.push_back(x.get<std::string>());
  }
  (void)body;
  return ok_status();
}

// Every top-level field of OpenAI's request schemas (and Tessera's own): honoured (with its
// limits checked where it is read) or refused here by name — no OpenAI field is silently
// ignored. A key that is in neither schema is ignored (forward compatibility, as vLLM).
Status check_fields(const json& body, RequestKind kind, std::string* bad_param) {
  static const std::set<std::string, std::less<>> common = {
      "model", "max_tokens", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
      "frequency_penalty", "repetition_penalty", "seed", "stop", "user", "n", "logprobs", "logit_bias",
      // Tessera (docs/api.md)
      "preference", "preference_alpha", "priority", "routing_key", "ignore_eos", "stop_token_ids", "kv_policy",
      "documents", "recompute_ratio",
      // vLLM's
      "cache_salt", "response_format"};
  static const std::set<std::string, std::less<>> completion_only = {"prompt", "best_of", "echo", "suffix"};
  static const std::set<std::string, std::less<>> chat_only = {"messages", "max_completion_tokens", "top_logprobs", "tools",
                                                               "tool_choice", "parallel_tool_calls"};
  // Fields of OpenAI's schemas that Tessera does not implement; refused whenever present (not
  // null), except for the values that ask for nothing beyond plain text.
  auto plain = [](const std::string& key, const json& v) {
    if (key == "functions") return v.is_array() && v.empty();
    if (key == "store") return v.is_boolean() && !v.get<bool>();
    if (key == "modalities") return v.is_array() && v.size() == 1 && v[0] == "text";
    return false;
  };
  for (const auto& [key, value] : body.items()) {
    if (common.count(key) || (kind == RequestKind::kCompletion ? completion_only : chat_only).count(key)) continue;
    if (value.is_null() || plain(key, value)) continue;
    *bad_param = key;
    if (kind == RequestKind::kCompletion && chat_only.count(key))
      return make_error(ErrorCode::kInvalidArgument, "'" + key + "' is a chat-completions field; /v1/completions does not take it");
    if (kind == RequestKind::kChat && completion_only.count(key))
      return make_error(ErrorCode::kInvalidArgument, "'" + key + "' is a completions field; /v1/chat/completions does not take it");
    static const std::set<std::string, std::less<>> known_unsupported = {
        "functions", "function_call", "audio",
        "modalities", "prediction", "reasoning_effort", "service_tier", "store", "metadata", "web_search_options",
        "verbosity", "prompt_cache_key", "safety_identifier"};
    if (known_unsupported.count(key))
      return make_error(ErrorCode::kUnsupported, "'" + key + "' is not supported by this server (docs/api.md, field table)");
    bad_param->clear();  // not a field of OpenAI's schemas nor Tessera's: ignored, as vLLM does
  }
  return ok_status();
}

// stream_options: {"include_usage": bool}, only with stream: true (as OpenAI).
Status parse_stream_options(const Reader& rd, bool stream, bool* include_usage) {
  const json* so = rd.find("stream_options");
  if (!so) return ok_status();
  if (!so->is_object()) return rd.type_error("stream_options", "an object", *so);
  if (!stream) return rd.fail("stream_options", ErrorCode::kInvalidArgument, "stream_options is only allowed with stream: true");
  for (const auto& [k, v] : so->items()) {
    if (k == "include_usage" && (v.is_boolean() || v.is_null())) {
      *include_usage = v.is_boolean() && v.get<bool>();
      continue;
    }
    if (k == "include_usage") return rd.type_error("stream_options", "{\"include_usage\": boolean}", v);
    return rd.fail("stream_options", ErrorCode::kUnsupported, "stream_options." + k + " is not supported");
  }
  return ok_status();
}

// logit_bias: {"<token id>": bias in [-100, 100]} (the ids are checked against the vocabulary
// by the request preparer).
Status parse_logit_bias(const Reader& rd, SamplingParams* sp) {
  const json* lb = rd.find("logit_bias");
  if (!lb) return ok_status();
  if (!lb->is_object()) return rd.type_error("logit_bias", "an object mapping token ids to biases", *lb);
  for (const auto& [k, v] : lb->items()) {
    char* end = nullptr;
    const long long id = std::strtoll(k.c_str(), &end, 10);
    if (k.empty() || *end != '\0' || id < 0 || id > INT32_MAX)
      return rd.fail("logit_bias", ErrorCode::kInvalidArgument, "logit_bias key '" + k + "' is not a token id");
    if (!v.is_number()) return rd.type_error("logit_bias", "an object mapping token ids to numbers", v);
    sp->logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
  }
  return ok_status();
}

// n (both endpoints), best_of and echo (completions), suffix (refused unless empty).
Status parse_choices(const Reader& rd, RequestKind kind, ParsedRequest* out) {
  TS_TRY(rd.integer("n", &out->n));
  if (out->n < 1 || out->n > kMaxChoices)
    return rd.fail("n", ErrorCode::kOutOfRange, "n must be in [1, " + std::to_string(kMaxChoices) + "] (got " + std::to_string(out->n) + ")");
  out->best_of = out->n;
  if (kind != RequestKind::kCompletion) return ok_status();
  if (rd.find("best_of") != nullptr) {
    TS_TRY(rd.integer("best_of", &out->best_of));
    if (out->best_of < out->n || out->best_of > kMaxChoices)
      return rd.fail("best_of", ErrorCode::kOutOfRange, "best_of must be in [n, " + std::to_string(kMaxChoices) + "] (got " +
                                                            std::to_string(out->best_of) + " with n = " + std::to_string(out->n) + ")");
    if (out->best_of > 1 && out->request.stream)
      return rd.fail("best_of", ErrorCode::kInvalidArgument, "best_of > 1 cannot be streamed (as OpenAI); send stream: false");
  }
  const int64_t sequences = static_cast<int64_t>(out->prompts.size()) * out->best_of;
  if (sequences > kMaxSequences)
    return rd.fail(rd.find("best_of") != nullptr ? "best_of" : "n", ErrorCode::kOutOfRange,
                   std::to_string(out->prompts.size()) + " prompts x " + std::to_string(out->best_of) + " candidates = " +
                       std::to_string(sequences) + " sequences; at most " + std::to_string(kMaxSequences) + " per request");
  TS_TRY(rd.boolean("echo", &out->echo));
  std::string suffix;
  TS_TRY(rd.str("suffix", &suffix));
  if (!suffix.empty()) return rd.fail("suffix", ErrorCode::kUnsupported, "suffix: insertion (a non-empty suffix) is not supported");
  return ok_status();
}

}  // namespace

Status check_body_depth(std::string_view body) {
  if (json_nesting_depth(body, kMaxBodyJsonDepth) <= kMaxBodyJsonDepth) return ok_status();
  return make_error(ErrorCode::kInvalidArgument, "request body nests JSON arrays/objects more than " +
                                                     std::to_string(kMaxBodyJsonDepth) + " levels deep");
}

Result<ParsedRequest> parse_request(std::string_view body_text, RequestKind kind, const ParseOptions& options,
                                    std::string* bad_param) {
  TS_TRY(check_body_depth(body_text));
  json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return make_error(ErrorCode::kMalformedMessage, "request body is not valid JSON");
  if (!body.is_object())
    return make_error(ErrorCode::kInvalidArgument, std::string("request body must be a JSON object (got ") + json_type(body) + ")");
  ParsedRequest out;
  protocol::GenerateRequest& r = out.request;
  r.kind = kind;
  r.max_tokens = options.default_max_tokens;
  r.stream = false;
  Reader rd(body, bad_param);
  TS_TRY(check_fields(body, kind, bad_param));
  TS_TRY(rd.str("model", &r.model));
  if (kind == RequestKind::kChat) {
    TS_TRY(parse_messages(body, &r, bad_param, &out.tools));
    TS_TRY(parse_tools(body, body_text, &out.tools, bad_param));
  }
  else TS_TRY(parse_prompt(body, &out, bad_param));
  out.max_tokens_given = rd.find("max_tokens") != nullptr || (kind == RequestKind::kChat && rd.find("max_completion_tokens") != nullptr);
  TS_TRY(rd.integer("max_tokens", &r.max_tokens));
  if (kind == RequestKind::kChat) TS_TRY(rd.integer("max_completion_tokens", &r.max_tokens));
  TS_TRY(rd.boolean("stream", &r.stream));
  TS_TRY(rd.number("temperature", &r.sampling.temperature));
  TS_TRY(rd.number("top_p", &r.sampling.top_p));
  TS_TRY(rd.integer("top_k", &r.sampling.top_k));
  TS_TRY(rd.number("min_p", &r.sampling.min_p));
  TS_TRY(rd.number("presence_penalty", &r.sampling.presence_penalty));
  TS_TRY(rd.number("frequency_penalty", &r.sampling.frequency_penalty));
  TS_TRY(rd.number("repetition_penalty", &r.sampling.repetition_penalty));
  TS_TRY(rd.integer("seed", &r.sampling.seed));
  TS_TRY(parse_stop(rd, body, &r));
  TS_TRY(rd.str("user", &r.user));
  TS_TRY(rd.str("preference", &r.preference));
  TS_TRY(rd.number("preference_alpha", &r.preference_alpha));
  TS_TRY(rd.integer("priority", &r.priority));
  TS_TRY(rd.str("routing_key", &r.routing_key));
  TS_TRY(rd.str("cache_salt", &r.cache_salt));
  if (rd.find("cache_salt") && (r.cache_salt.empty() || r.cache_salt.size() > protocol::kMaxCacheSaltBytes))
    return rd.fail("cache_salt", ErrorCode::kInvalidArgument,
                   "cache_salt must be a non-empty string of at most " + std::to_string(protocol::kMaxCacheSaltBytes) + " bytes");
  TS_TRY(rd.boolean("ignore_eos", &r.ignore_eos));
  out.kv_policy_given = rd.find("kv_policy") != nullptr;
  if (const json* kp = rd.find("kv_policy"); kp != nullptr) {
    if (Status st = parse_kv_policy(*kp, &r.kv_policy); !st.ok()) return rd.fail("kv_policy", st.error().code, st.error().message);
  }
  // CacheBlend (docs/api.md "Reusable documents").
  if (const json* docs = rd.find("documents")) {
    if (!docs->is_array()) return rd.type_error("documents", "an array of strings", *docs);
    if (docs->size() > kMaxBlendChunks)
      return rd.fail("documents", ErrorCode::kInvalidArgument, "documents holds " + std::to_string(docs->size()) +
                                                                 " documents; at most " + std::to_string(kMaxBlendChunks));
    for (const auto& d : *docs) {
      if (!d.is_string()) return rd.type_error("documents", "an array of strings", d);
      const auto& text = d.get_ref<const std::string&>();
      if (text.empty()) return rd.fail("documents", ErrorCode::kInvalidArgument, "documents holds an empty string");
      if (text.size() > kMaxDocumentBytes)
        return rd.fail("documents", ErrorCode::kInvalidArgument, "a document has " + std::to_string(text.size()) + " bytes; at most " +
                                                            std::to_string(kMaxDocumentBytes));
      r.documents.push_back(text);
    }
  }
  TS_TRY(rd.number("recompute_ratio", &r.recompute_ratio));
  if (rd.find("recompute_ratio") != nullptr) {
    if (!(r.recompute_ratio >= 0.0f && r.recompute_ratio <= 1.0f))
      return rd.fail("recompute_ratio", ErrorCode::kInvalidArgument, "recompute_ratio must be in [0, 1]");
    if (r.documents.empty()) return rd.fail("recompute_ratio", ErrorCode::kInvalidArgument, "recompute_ratio needs documents");
  }
  if (const json* ids = rd.find("stop_token_ids")) {
    if (!ids->is_array()) return rd.type_error("stop_token_ids", "an array of integers", *ids);
    for (const auto& x : *ids) {
      if (!x.is_number_integer()) return rd.type_error("stop_token_ids", "an array of integers", x);
      int64_t v = x.get<int64_t>();
      if (v < 0 || v > INT32_MAX) return rd.fail("stop_token_ids", ErrorCode::kOutOfRange, "stop_token_ids holds an out-of-range id");
      r.stop_token_ids.push_back(static_cast<int32_t>(v));
    }
  }
  TS_TRY(parse_choices(rd, kind, &out));
  out.seed_given = rd.find("seed") != nullptr;
  TS_TRY(parse_stream_options(rd, r.stream, &out.include_usage));
  TS_TRY(parse_logit_bias(rd, &r.sampling));
  if (const json* rf = rd.find("response_format")) {
    if (Status st = parse_response_format(*rf, body_text, &r.sampling); !st.ok()) {
      *bad_param = "response_format";
      return st.error();
    }
  }
  if (out.tools.forced()) {
    if (!r.sampling.grammar.empty())
      return rd.fail("tool_choice", ErrorCode::kInvalidArgument,
                     "tool_choice '" + std::string(out.tools.choice == ToolChoice::kNamed ? "named" : "required") +
                         "' constrains the output itself; it cannot be combined with response_format");
    r.sampling.grammar = forcing_schema(out.tools);
  }
  if (kind == RequestKind::kCompletion) {
    // completions: "logprobs": n (number of alternatives, 0..20)
    int32_t lp = -1;
    TS_TRY(rd.integer("logprobs", &lp));
    // null or absent = no logprobs; a negative count is an error, not "off" (vLLM refuses it too).
    if (rd.find("logprobs") != nullptr && lp < 0)
      return rd.fail("logprobs", ErrorCode::kInvalidArgument, "'logprobs' must be between 0 and 20 (got " + std::to_string(lp) + ")");
    if (lp >= 0) {
      out.logprobs = true;
      r.sampling.logprobs = true;
      r.sampling.top_logprobs = lp;
    }
    // echo + logprobs: the prompt tokens' log-probabilities too, scored by the worker during
    // the prefill (docs/api.md "Several choices", echo).
    if (out.echo && out.logprobs) r.sampling.prompt_logprobs = lp;
  } else {
    TS_TRY(rd.boolean("logprobs", &out.logprobs));
    r.sampling.logprobs = out.logprobs;
    TS_TRY(rd.integer("top_logprobs", &r.sampling.top_logprobs));
    if (r.sampling.top_logprobs < 0)
      return rd.fail("top_logprobs", ErrorCode::kInvalidArgument,
                     "'top_logprobs' must be between 0 and 20 (got " + std::to_string(r.sampling.top_logprobs) + ")");
    // OpenAI and vLLM: top_logprobs needs logprobs: true.
    if (rd.find("top_logprobs") != nullptr && !out.logprobs)
      return rd.fail("top_logprobs", ErrorCode::kInvalidArgument, "top_logprobs requires logprobs: true");
  }
  Status v = protocol::validate(r);
  if (!v.ok()) {
    // Name the field: validation messages start with it.
    const std::string& m = v.error().message;
    *bad_param = m.substr(0, m.find_first_of(" [."));
    return v.take_error();
  }
  return out;
}

}  // namespace tessera::frontend
