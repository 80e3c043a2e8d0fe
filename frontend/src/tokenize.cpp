#include "tokenize.h"

#include <nlohmann/json.hpp>

#include "tessera/frontend/openai.h"

namespace tessera::frontend {

using json = nlohmann::json;

namespace {

Result<json> object_body(std::string_view body) {
  TS_TRY(check_body_depth(body));
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(ErrorCode::kMalformedMessage, "request body is not valid JSON");
  if (!j.is_object()) return make_error(ErrorCode::kInvalidArgument, "request body must be a JSON object");
  return j;
}

Status only_fields(const json& j, std::initializer_list<const char*> allowed, std::string* param) {
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || key == a;
    if (!ok) {
      *param = key;
      return make_error(ErrorCode::kInvalidArgument, "unrecognized request field '" + key + "'");
    }
  }
  return ok_status();
}

}  // namespace

Result<std::string> tokenize_json(std::string_view body, const RequestPreparer& preparer, const ServingLimits& limits,
                                  std::string* param) {
  TS_ASSIGN_OR_RETURN(json j, object_body(body));
  TS_TRY(only_fields(j, {"model", "prompt", "content", "messages", "add_special_tokens", "add_generation_prompt"}, param));
  std::vector<int32_t> tokens;
  if (j.contains("messages")) {
    // The chat request's own path: the same template and tokenization as /v1/chat/completions.
    json chat = {{"messages", j["messages"]}};
    if (j.contains("model")) chat["model"] = j["model"];
    TS_ASSIGN_OR_RETURN(ParsedRequest parsed, parse_request(chat.dump(), protocol::RequestKind::kChat, {}, param));
    TS_TRY(preparer.prepare(parsed.request, {.tools = &parsed.tools.chat}));
    tokens = std::move(parsed.request.prompt_tokens);
  } else {
    const char* key = j.contains("prompt") ? "prompt" : "content";
    if (!j.contains(key) || !j[key].is_string()) {
      *param = "prompt";
      return make_error(ErrorCode::kInvalidArgument, "'prompt' (or 'content') must be a string, or give 'messages'");
    }
    bool add_special = true;
    if (j.contains("add_special_tokens")) {
      if (!j["add_special_tokens"].is_boolean()) {
        *param = "add_special_tokens";
        return make_error(ErrorCode::kInvalidArgument, "'add_special_tokens' must be a boolean");
      }
      add_special = j["add_special_tokens"].get<bool>();
    }
    if (j.contains("model") && j["model"] != preparer.model_name()) {
      *param = "model";
      return make_error(ErrorCode::kNotFound, "model '" + j["model"].dump() + "' does not exist");
    }
    tokens = preparer.tokenizer().encode(j[key].get<std::string>(), add_special);
  }
  json out = {{"tokens", tokens}, {"count", tokens.size()}};
  if (limits.context_length > 0) out["max_model_len"] = limits.context_length;
  return out.dump();
}

Result<std::string> detokenize_json(std::string_view body, const RequestPreparer& preparer, std::string* param) {
  TS_ASSIGN_OR_RETURN(json j, object_body(body));
  TS_TRY(only_fields(j, {"model", "tokens"}, param));
  *param = "tokens";
  if (!j.contains("tokens") || !j["tokens"].is_array()) return make_error(ErrorCode::kInvalidArgument, "'tokens' must be an array of token ids");
  std::vector<int32_t> ids;
  const int32_t vocab = preparer.tokenizer().vocab_size();
  for (const auto& t : j["tokens"]) {
    if (!t.is_number_integer()) return make_error(ErrorCode::kInvalidArgument, "'tokens' must be an array of token ids");
    const int64_t v = t.get<int64_t>();
    if (v < 0 || v >= vocab)
      return make_error(ErrorCode::kOutOfRange, "token id " + std::to_string(v) + " is outside the vocabulary (size " + std::to_string(vocab) + ")");
    ids.push_back(static_cast<int32_t>(v));
  }
  param->clear();
  const std::string text = preparer.tokenizer().decode(ids);
  return json{{"prompt", text}, {"content", text}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tessera::frontend
