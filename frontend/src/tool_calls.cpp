#include "tessera/frontend/tool_calls.h"

#include "tessera/frontend/openai.h"

#include <cstdio>
#include <optional>
#include <random>

#include "tessera/common/json_depth.h"
#include "tessera/common/step_plan.h"
#include "tessera/grammar/grammar.h"

namespace tessera::frontend {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

Status fail(std::string* bad_param, std::string param, std::string message, ErrorCode code = ErrorCode::kInvalidArgument) {
  *bad_param = std::move(param);
  return make_error(code, std::move(message));
}

// JSON text that did not come through the request body's depth check (the model's output, or
// a JSON text inside a string of the body: a tool call's "arguments") parsed as the body is: a
// text nested deeper than kMaxBodyJsonDepth is treated as not JSON (dump() and the templates
// recurse once per level).
template <class J>
J parse_bounded(std::string_view text) {
  if (json_nesting_depth(text, kMaxBodyJsonDepth) > kMaxBodyJsonDepth) return J(J::value_t::discarded);
  return J::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::string random_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[32];
  std::snprintf(buf, sizeof buf, "call_%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return buf;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// {"name": string, "arguments"|"parameters": object or JSON-text string} -> a call.
std::optional<ToolCall> call_from(const json& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const json* args = nullptr;
  if (j.contains("arguments")) args = &j["arguments"];
  else if (j.contains("parameters")) args = &j["parameters"];
  ToolCall c{random_call_id(), j["name"].get<std::string>(), "{}"};
  if (args != nullptr) {
    if (args->is_string()) {
      const json inner = parse_bounded<json>(args->get<std::string>());
      if (inner.is_discarded()) return std::nullopt;
      c.arguments = inner.dump();
    } else if (args->is_object()) {
      c.arguments = args->dump();
    } else {
      return std::nullopt;
    }
  }
  if (c.name.empty()) return std::nullopt;
  return c;
}

std::optional<ToolCall> call_from_text(std::string_view text) {
  const json j = parse_bounded<json>(trim(text));
  if (j.is_discarded()) return std::nullopt;
  return call_from(j);
}

ToolParse plain(std::string_view text) { return ToolParse{{}, std::string(text)}; }

ToolParse parse_hermes(std::string_view text) {
  static constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  ToolParse out;
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) break;
    content += text.substr(pos, open - pos);
    const size_t body = open + kOpen.size();
    size_t close = text.find(kClose, body);
    const bool closed = close != std::string_view::npos;
    if (!closed) close = text.size();  // a call cut at the end of the output (the stop piece took the rest)
    auto call = call_from_text(text.substr(body, close - body));
    if (!call) return plain(text);
    out.calls.push_back(std::move(*call));
    pos = closed ? close + kClose.size() : text.size();
  }
  if (out.calls.empty()) return plain(text);
  if (pos < text.size()) content += text.substr(pos);
  out.content = std::string(trim(content));
  return out;
}

ToolParse parse_llama3(std::string_view text) {
  std::string_view s = trim(text);
  static constexpr std::string_view kTag = "<|python_tag|>";
  if (s.substr(0, kTag.size()) == kTag) s = trim(s.substr(kTag.size()));
  if (s.empty() || s.front() != '{') return plain(text);
  ToolParse out;
  // One object, or several separated by ';' (Llama 3.2's parallel form).
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find(';', start);
    while (true) {
      const std::string_view piece = s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
      auto call = call_from_text(piece);
      if (call) {
        out.calls.push_back(std::move(*call));
        break;
      }
      if (end == std::string_view::npos) return plain(text);
      end = s.find(';', end + 1);  // a ';' inside a string: take more
    }
    if (end == std::string_view::npos) break;
    start = end + 1;
    while (start < s.size() && (s[start] == ' ' || s[start] == '\n')) ++start;
  }
  if (out.calls.empty()) return plain(text);
  return out;
}

ToolParse parse_mistral(std::string_view text) {
  static constexpr std::string_view kTag = "[TOOL_CALLS]";
  const size_t at = text.find(kTag);
  if (at == std::string_view::npos) return plain(text);
  std::string_view rest = trim(text.substr(at + kTag.size()));
  static constexpr std::string_view kEos = "</s>";
  if (rest.size() >= kEos.size() && rest.substr(rest.size() - kEos.size()) == kEos) rest = trim(rest.substr(0, rest.size() - kEos.size()));
  const json j = parse_bounded<json>(rest);
  if (j.is_discarded()) return plain(text);
  ToolParse out;
  const json list = j.is_array() ? j : json::array({j});
  for (const auto& item : list) {
    auto call = call_from(item);
    if (!call) return plain(text);
    out.calls.push_back(std::move(*call));
  }
  if (out.calls.empty()) return plain(text);
  out.content = std::string(trim(text.substr(0, at)));
  return out;
}

Status check_schema(const ojson& schema, const std::string& param, std::string* bad_param) {
  const std::string text = schema.dump();
  if (text.size() > kMaxGrammarBytes)
    return fail(bad_param, param, param + " is " + std::to_string(text.size()) + " bytes; at most " + std::to_string(kMaxGrammarBytes) +
                                      " are allowed", ErrorCode::kTooLarge);
  auto compiled = grammar::compile_json_schema(text);
  if (!compiled.ok()) return fail(bad_param, param, param + compiled.error().message, compiled.error().code);
  return ok_status();
}

ojson call_schema(const ojson& tool) {
  const ojson& f = tool["function"];
  ojson params = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : ojson{{"type", "object"}};
  return ojson{{"type", "object"},
               {"properties", {{"name", {{"const", f["name"]}}}, {"arguments", params}}},
               {"required", {"name", "arguments"}},
               {"additionalProperties", false}};
}

}  // namespace

// The tool fields of one message (docs/api.md "Tool calls"): an assistant's tool_calls, a tool
// message's tool_call_id (required) and name. Arguments that are JSON text reach the template as
// objects, as HF transformers templates expect.
Result<nlohmann::ordered_json> message_tool_fields(const json& m, const std::string& role, const std::string& at,
                                                   std::string* bad_param) {
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  auto bad = [&](const std::string& param, const std::string& what) {
    *bad_param = param;
    return make_error(ErrorCode::kInvalidArgument, param + " " + what);
  };
  if (role == "tool") {
    if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string()) return bad(at + ".tool_call_id", "is required (a string) in a tool message");
    extra["tool_call_id"] = m["tool_call_id"];
    if (m.contains("name") && m["name"].is_string()) extra["name"] = m["name"];
  }
  if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
    if (role != "assistant") return bad(at + ".tool_calls", "is only allowed in an assistant message");
    const json& calls = m["tool_calls"];
    if (!calls.is_array()) return bad(at + ".tool_calls", "must be an array");
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (size_t k = 0; k < calls.size(); ++k) {
      const json& c = calls[k];
      const std::string ck = at + ".tool_calls[" + std::to_string(k) + "]";
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") ||
          !c["function"]["name"].is_string())
        return bad(ck, "must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
      const json& f = c["function"];
      nlohmann::ordered_json args = nlohmann::ordered_json::object();
      if (f.contains("arguments") && f["arguments"].is_string()) {
        args = parse_bounded<nlohmann::ordered_json>(f["arguments"].get<std::string>());
        if (args.is_discarded()) args = f["arguments"].get<std::string>();
      } else if (f.contains("arguments") && !f["arguments"].is_null()) {
        args = f["arguments"];
      }
      nlohmann::ordered_json call = {{"id", c.value("id", "")},
                                     {"type", "function"},
                                     {"function", {{"name", f["name"]}, {"arguments", args}}}};
      out.push_back(std::move(call));
    }
    extra["tool_calls"] = std::move(out);
  }
  return extra;
}

json tool_calls_json(const std::vector<ToolCall>& calls, bool indexed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = {{"id", calls[i].id}, {"type", "function"}, {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (indexed) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

// The chunk stream_chunk() writes for the content (if any), with delta.tool_calls added.
std::string tool_calls_chunk(const ResponseMeta& meta, const std::string& content, const std::vector<ToolCall>& calls, bool first,
                             std::string_view finish_reason, const protocol::FinalEvent* final_event, int32_t index) {
  const std::string base = stream_chunk(meta, content, {}, first, finish_reason, final_event, index);
  json j = json::parse(base.substr(6));  // "data: {...}\n\n"
  j["choices"][0]["delta"]["tool_calls"] = tool_calls_json(calls, true);
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

Status parse_tools(const json& body, std::string_view body_text, ToolSet* out, std::string* bad_param) {
  const auto ordered = ojson::parse(body_text, nullptr, /*allow_exceptions=*/false);
  const auto tools_it = body.find("tools");
  const bool has_tools = tools_it != body.end() && !tools_it->is_null();
  if (has_tools) {
    if (!tools_it->is_array()) return fail(bad_param, "tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
    if (tools_it->size() > 128) return fail(bad_param, "tools", "at most 128 tools are allowed", ErrorCode::kTooLarge);
    out->chat.tools = ordered.is_object() && ordered.contains("tools") ? ordered["tools"] : ojson(*tools_it);
    for (size_t i = 0; i < out->chat.tools.size(); ++i) {
      const ojson& t = out->chat.tools[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || t.value("type", "") != "function")
        return fail(bad_param, at + ".type", at + ".type must be \"function\" (the only tool type supported)",
                    t.is_object() && t.contains("type") ? ErrorCode::kUnsupported : ErrorCode::kInvalidArgument);
      if (!t.contains("function") || !t["function"].is_object())
        return fail(bad_param, at + ".function", at + ".function must be an object with a 'name'");
      const ojson& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
        return fail(bad_param, at + ".function.name", at + ".function.name must be a non-empty string");
      if (f.contains("description") && !f["description"].is_string() && !f["description"].is_null())
        return fail(bad_param, at + ".function.description", at + ".function.description must be a string");
      if (f.contains("parameters") && !f["parameters"].is_object() && !f["parameters"].is_null())
        return fail(bad_param, at + ".function.parameters", at + ".function.parameters must be a JSON Schema object");
      const std::string name = f["name"].get<std::string>();
      for (const auto& n : out->names)
        if (n == name) return fail(bad_param, at + ".function.name", "two tools are named '" + name + "'");
      out->names.push_back(name);
    }
  }
  out->choice = out->names.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  const auto tc = body.find("tool_choice");
  if (tc != body.end() && !tc->is_null()) {
    if (tc->is_string()) {
      const std::string v = tc->get<std::string>();
      if (v == "none") out->choice = ToolChoice::kNone;
      else if (v == "auto") out->choice = out->names.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
      else if (v == "required") out->choice = ToolChoice::kRequired;
      else return fail(bad_param, "tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}} (got \"" + v + "\")");
    } else if (tc->is_object() && tc->value("type", "") == "function" && tc->contains("function") && (*tc)["function"].is_object() &&
               (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      out->choice = ToolChoice::kNamed;
      out->forced_name = (*tc)["function"]["name"].get<std::string>();
      bool known = false;
      for (const auto& n : out->names) known = known || n == out->forced_name;
      if (!known) return fail(bad_param, "tool_choice", "tool_choice names '" + out->forced_name + "', which is not in 'tools'");
    } else {
      return fail(bad_param, "tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (out->forced() && out->names.empty())
      return fail(bad_param, "tool_choice", "tool_choice '" + std::string(out->choice == ToolChoice::kNamed ? "named" : "required") +
                                                "' needs a non-empty 'tools'");
  }
  const auto ptc = body.find("parallel_tool_calls");
  if (ptc != body.end() && !ptc->is_null()) {
    if (!ptc->is_boolean()) return fail(bad_param, "parallel_tool_calls", "parallel_tool_calls must be a boolean");
    out->parallel = ptc->get<bool>();
  }
  if (out->forced()) {
    for (size_t i = 0; i < out->chat.tools.size(); ++i) {
      const ojson& f = out->chat.tools[i]["function"];
      if (out->choice == ToolChoice::kNamed && f["name"] != out->forced_name) continue;
      if (f.contains("parameters") && f["parameters"].is_object())
        TS_TRY(check_schema(f["parameters"], "tools[" + std::to_string(i) + "].function.parameters", bad_param));
    }
    TS_TRY(check_schema(ojson::parse(forcing_schema(*out)), "tools", bad_param));
  }
  return ok_status();
}

std::string forcing_schema(const ToolSet& tools) {
  ojson any = ojson::array();
  for (const auto& t : tools.chat.tools) {
    if (tools.choice == ToolChoice::kNamed && t["function"]["name"] != tools.forced_name) continue;
    any.push_back(call_schema(t));
  }
  if (any.size() == 1) return any[0].dump();
  // Several tools: the grammar cannot choose among object schemas that all start with '{', so
  // the name is one of the tools' and the arguments any JSON object (docs/api.md "Tool calls").
  ojson names = ojson::array();
  for (const auto& n : tools.names) names.push_back(n);
  return ojson{{"type", "object"},
               {"properties", {{"name", {{"enum", names}}}, {"arguments", {{"type", "object"}}}}},
               {"required", {"name", "arguments"}},
               {"additionalProperties", false}}
      .dump();
}

std::shared_ptr<const std::map<std::string, RequiredTool>> required_tool_parameters(const ToolSet& tools) {
  if (tools.choice != ToolChoice::kRequired || tools.names.size() < 2) return nullptr;
  auto out = std::make_shared<std::map<std::string, RequiredTool>>();
  for (const auto& t : tools.chat.tools) {
    const auto& f = t["function"];
    (*out)[f["name"].get<std::string>()] =
        RequiredTool{f.contains("parameters") ? f["parameters"] : ojson{{"type", "object"}}, call_schema(t).dump()};
  }
  return out;
}

std::string new_call_id() { return random_call_id(); }

size_t forced_arguments_start(std::string_view text, std::string* name) {
  static constexpr std::string_view kOpen = "{\"name\":", kArgs = ",\"arguments\":";
  const size_t b = text.find_first_not_of(" \n\t\r");
  if (b == std::string_view::npos || text.substr(b, kOpen.size()) != kOpen) return std::string_view::npos;
  const size_t k = text.find(kArgs, b + kOpen.size());
  if (k == std::string_view::npos) return std::string_view::npos;
  const json n = parse_bounded<json>(text.substr(b + kOpen.size(), k - b - kOpen.size()));
  if (!n.is_string()) return std::string_view::npos;
  if (name != nullptr) *name = n.get<std::string>();
  return k + kArgs.size();
}

// A piece of a forced call's arguments as a chat chunk (openai.h).
std::string tool_call_delta_chunk(const ResponseMeta& meta, const ToolCall* header, std::string_view arguments, bool first,
                                  std::string_view finish_reason, const protocol::FinalEvent* final_event, int32_t index) {
  const std::string base = stream_chunk(meta, "", {}, first, finish_reason, final_event, index);
  json j = json::parse(base.substr(6));  // "data: {...}\n\n"
  json& delta = j["choices"][0]["delta"];
  delta.erase("content");
  json call = {{"index", 0}, {"function", {{"arguments", std::string(arguments)}}}};
  if (header != nullptr) {
    call["id"] = header->id;
    call["type"] = "function";
    call["function"]["name"] = header->name;
  }
  delta["tool_calls"] = json::array({call});
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

ToolParse parse_tool_calls(ToolFormat format, std::string_view text, bool forced) {
  if (forced) {
    if (auto call = call_from_text(text)) {
      // The grammar's compact {"name":..,"arguments":{..}}: the arguments exactly as generated
      // (as they were streamed), not re-serialized.
      const size_t at = forced_arguments_start(text, nullptr);
      const size_t end = text.find_last_of('}');
      if (at != std::string_view::npos && end != std::string_view::npos && end > at &&
          !parse_bounded<json>(text.substr(at, end - at)).is_discarded())
        call->arguments = std::string(text.substr(at, end - at));
      return ToolParse{{std::move(*call)}, ""};
    }
    // The template's generation prompt may have been followed by the format's wrapper.
  }
  switch (format) {
    case ToolFormat::kHermes: return parse_hermes(text);
    case ToolFormat::kLlama3: return parse_llama3(text);
    case ToolFormat::kMistral: return parse_mistral(text);
  }
  return plain(text);
}

}  // namespace tessera::frontend
