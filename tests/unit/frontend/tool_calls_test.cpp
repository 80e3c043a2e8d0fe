// Tool calls (docs/api.md "Tool calls"): the request fields, rendering through the template (and
// the Hermes fallback), the forcing grammar, and the three parsers with exact outputs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tessera/frontend/chat_template.h"
#include "tessera/frontend/openai.h"
#include "tessera/frontend/tool_calls.h"
#include "tessera/grammar/grammar.h"

namespace tessera::frontend {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using protocol::ChatMessage;
using protocol::RequestKind;

// An excerpt of Qwen2.5-Instruct's template (its tools, tool_calls and tool-message parts verbatim).
const char* kQwen25 =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are Qwen.' }}{%- endif %}"
    "{{- \"\\n\\n# Tools\\n\\n<tools>\" }}{%- for tool in tools %}{{- \"\\n\" }}{{- tool | tojson }}{%- endfor %}"
    "{{- \"\\n</tools><|im_end|>\\n\" }}"
    "{%- else %}{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}{{- tool_call.arguments | tojson }}"
    "{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

const char* kTools = R"([{"type":"function","function":{"name":"get_weather","description":"Weather of a city",
    "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}])";

ParsedRequest parse_ok(const std::string& body) {
  std::string param;
  auto r = parse_request(body, RequestKind::kChat, {}, &param);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
  return r.ok() ? std::move(r).value() : ParsedRequest{};
}

std::string parse_error(const std::string& body, std::string* param) {
  auto r = parse_request(body, RequestKind::kChat, {}, param);
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? "" : r.error().message;
}

// A round trip's second request: the call, then the tool's answer.
std::string round_trip_body() {
  return std::string(R"({"messages":[{"role":"developer","content":"Be brief."},{"role":"user","content":"Weather in Paris?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"sunny"}],"tools":)") + kTools + "}";
}

TEST(ToolCalls, ToolsAndToolMessagesReachTheTemplate) {
  ParsedRequest p = parse_ok(round_trip_body());
  ASSERT_EQ(p.request.messages.size(), 4u);
  EXPECT_EQ(p.request.messages[0].role, "system");  // developer
  EXPECT_EQ(p.tools.choice, ToolChoice::kAuto);
  EXPECT_TRUE(p.request.sampling.grammar.empty());
  ChatTemplate t = load_chat_template(kQwen25, {"", "<|im_end|>"}, "test");
  ASSERT_EQ(t.kind, ChatTemplateKind::kJinja);
  EXPECT_TRUE(t.handles_tools);
  EXPECT_EQ(t.tool_format, ToolFormat::kHermes);
  auto r = render_chat(t, p.request.messages, &p.tools.chat);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->text(),
            "<|im_start|>system\nBe brief.\n\n# Tools\n\n<tools>\n"
            "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather of a city\", "
            "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}"
            "\n</tools><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
}

TEST(ToolCalls, FallbackBlockForATemplateWithoutTools) {
  ParsedRequest p = parse_ok(round_trip_body());
  ChatTemplate t = detect_chat_template("");  // built-in ChatML: no tool support
  EXPECT_FALSE(t.handles_tools);
  auto r = render_chat(t, p.request.messages, &p.tools.chat);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  const std::string block = hermes_tools_block(p.tools.chat.tools);
  EXPECT_EQ(block, "# Tools\n<tools>\n" + p.tools.chat.tools[0].dump() +
                       "\n</tools>\nTo call one, reply <tool_call>{\"name\": <function-name>, \"arguments\": <args-json-object>}</tool_call>");
  EXPECT_EQ(r->text(), "<|im_start|>system\n" + block + "\n\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                       "<|im_start|>assistant\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call><|im_end|>\n"
                       "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  // A Jinja template that never mentions tools gets the same fallback (a system message first).
  ChatTemplate plain = load_chat_template(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}", {}, "test");
  EXPECT_FALSE(plain.handles_tools);
  auto r2 = render_chat(plain, {{"user", "hi"}}, &p.tools.chat);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->text(), "<system>" + block + "<user>hi<assistant>");
  // Without tools nothing changes.
  auto r3 = render_chat(plain, {{"user", "hi"}}, nullptr);
  EXPECT_EQ(r3->text(), "<user>hi<assistant>");
}

TEST(ToolCalls, FormatFromTemplate) {
  EXPECT_EQ(tool_format_for_template(kQwen25), ToolFormat::kHermes);
  EXPECT_EQ(tool_format_for_template("{{ '[TOOL_CALLS]' }}{{ tools }}"), ToolFormat::kMistral);
  EXPECT_EQ(tool_format_for_template("<|start_header_id|>ipython{{ tools }}"), ToolFormat::kLlama3);
  EXPECT_EQ(tool_format_for_template("{{ tools }}"), ToolFormat::kHermes);
}

TEST(ToolCalls, ForcingGrammar) {
  ParsedRequest named = parse_ok(std::string(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function",
      "function":{"name":"get_weather"}},"tools":)") + kTools + "}");
  EXPECT_EQ(named.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(named.request.sampling.grammar,
            R"({"type":"object","properties":{"name":{"const":"get_weather"},"arguments":{"type":"object","properties":)"
            R"({"city":{"type":"string"}},"required":["city"]}},"required":["name","arguments"],"additionalProperties":false})");
  ASSERT_TRUE(grammar::compile_json_schema(named.request.sampling.grammar).ok());
  const std::string two = R"([{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b",
      "parameters":{"type":"object","properties":{"n":{"type":"integer"}}}}}])";
  ParsedRequest req = parse_ok(std::string(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required","tools":)") + two + "}");
  EXPECT_EQ(req.request.sampling.grammar, R"({"type":"object","properties":{"name":{"enum":["a","b"]},"arguments":{"type":"object"}},)"
                                          R"("required":["name","arguments"],"additionalProperties":false})");
  ParsedRequest none = parse_ok(std::string(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"none","tools":)") + two + "}");
  EXPECT_FALSE(none.tools.active());
  EXPECT_TRUE(none.request.sampling.grammar.empty());
}

TEST(ToolCalls, BadFieldsAreNamed) {
  const std::string msgs = R"({"messages":[{"role":"user","content":"x"}],)";
  std::string param;
  EXPECT_NE(parse_error(msgs + R"("tools":{}})", &param).find("'tools' must be an array"), std::string::npos);
  EXPECT_EQ(param, "tools");
  parse_error(msgs + R"("tools":[{"type":"function","function":{}}]})", &param);
  EXPECT_EQ(param, "tools[0].function.name");
  parse_error(msgs + R"("tools":[{"type":"retrieval"}]})", &param);
  EXPECT_EQ(param, "tools[0].type");
  EXPECT_NE(parse_error(msgs + R"("tool_choice":{"type":"function","function":{"name":"nope"}},"tools":)" + kTools + "}", &param)
                .find("'nope', which is not in 'tools'"), std::string::npos);
  EXPECT_EQ(param, "tool_choice");
  parse_error(msgs + R"("tool_choice":"required"})", &param);
  EXPECT_EQ(param, "tool_choice");
  parse_error(msgs + R"("tool_choice":"always","tools":)" + kTools + "}", &param);
  EXPECT_EQ(param, "tool_choice");
  parse_error(msgs + R"("tool_choice":"required","response_format":{"type":"json_object"},"tools":)" + kTools + "}", &param);
  EXPECT_EQ(param, "tool_choice");
  // A forced tool whose parameters use a keyword outside the grammar subset: named.
  EXPECT_NE(parse_error(msgs + R"("tool_choice":"required","tools":[{"type":"function","function":{"name":"f",
      "parameters":{"type":"object","properties":{"e":{"type":"string","format":"email"}}}}}]})", &param).find("keyword 'format'"),
            std::string::npos);
  EXPECT_EQ(param, "tools[0].function.parameters");
  parse_error(R"({"messages":[{"role":"tool","content":"x"}]})", &param);
  EXPECT_EQ(param, "messages[0].tool_call_id");
  parse_error(R"({"messages":[{"role":"user","content":"x","tool_calls":[]}]})", &param);
  EXPECT_EQ(param, "messages[0].tool_calls");
  EXPECT_NE(parse_error(R"({"messages":[{"role":"robot","content":"x"}]})", &param).find("role must be system, user, assistant or tool"),
            std::string::npos);
  parse_error(msgs + R"("parallel_tool_calls":"yes"})", &param);
  EXPECT_EQ(param, "parallel_tool_calls");
}

void expect_calls(const ToolParse& p, const std::vector<std::pair<std::string, std::string>>& calls, const std::string& content) {
  ASSERT_EQ(p.calls.size(), calls.size()) << p.content;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(p.calls[i].name, calls[i].first);
    EXPECT_EQ(p.calls[i].arguments, calls[i].second);
    EXPECT_EQ(p.calls[i].id.rfind("call_", 0), 0u);
    EXPECT_EQ(p.calls[i].id.size(), 5u + 24u);
  }
  EXPECT_EQ(p.content, content);
}

TEST(ToolCalls, HermesParser) {
  expect_calls(parse_tool_calls(ToolFormat::kHermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", false),
               {{"get_weather", R"({"city":"Paris"})"}}, "");
  expect_calls(parse_tool_calls(ToolFormat::kHermes,
                                "Let me check.\n<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":\"{\\\"n\\\":1}\"}</tool_call>",
                                false),
               {{"a", "{}"}, {"b", R"({"n":1})"}}, "Let me check.");
  // Cut before its closing tag (an end-of-turn stop took the rest): still a call.
  expect_calls(parse_tool_calls(ToolFormat::kHermes, "<tool_call>{\"name\":\"a\",\"arguments\":{\"x\":true}}", false), {{"a", R"({"x":true})"}}, "");
  // Malformed: plain content, unchanged.
  for (const char* bad : {"<tool_call>{\"name\": \"a\", \"arguments\": {</tool_call>", "<tool_call>{\"arguments\":{}}</tool_call>",
                          "no calls here", "{\"name\":\"a\",\"arguments\":{}}"}) {
    ToolParse p = parse_tool_calls(ToolFormat::kHermes, bad, false);
    EXPECT_TRUE(p.calls.empty()) << bad;
    EXPECT_EQ(p.content, bad);
  }
  // Forced: the bare object the grammar generates.
  expect_calls(parse_tool_calls(ToolFormat::kHermes, R"({"name":"get_weather","arguments":{"city":"Oslo"}})", true),
               {{"get_weather", R"({"city":"Oslo"})"}}, "");
}

TEST(ToolCalls, Llama3Parser) {
  expect_calls(parse_tool_calls(ToolFormat::kLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", false),
               {{"get_weather", R"({"city":"Paris"})"}}, "");
  expect_calls(parse_tool_calls(ToolFormat::kLlama3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"s\": \"x;y\"}}; {\"name\": \"b\", \"parameters\": {}}", false),
               {{"a", R"({"s":"x;y"})"}, {"b", "{}"}}, "");
  for (const char* bad : {"The weather is {\"name\": \"a\"}", "{\"name\": \"a\", \"parameters\": [1]}", "{\"name\": \"a\", \"parameters\": {",
                          "{\"city\": \"Paris\"}"}) {
    ToolParse p = parse_tool_calls(ToolFormat::kLlama3, bad, false);
    EXPECT_TRUE(p.calls.empty()) << bad;
    EXPECT_EQ(p.content, bad);
  }
}

TEST(ToolCalls, MistralParser) {
  expect_calls(parse_tool_calls(ToolFormat::kMistral,
                                "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"b\", \"arguments\": {}}]", false),
               {{"get_weather", R"({"city":"Paris"})"}, {"b", "{}"}}, "");
  expect_calls(parse_tool_calls(ToolFormat::kMistral, "Sure. [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}]</s>", false), {{"a", "{}"}}, "Sure.");
  for (const char* bad : {"[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}", "[TOOL_CALLS][{\"arguments\": {}}]", "[{\"name\": \"a\", \"arguments\": {}}]"}) {
    ToolParse p = parse_tool_calls(ToolFormat::kMistral, bad, false);
    EXPECT_TRUE(p.calls.empty()) << bad;
    EXPECT_EQ(p.content, bad);
  }
}

TEST(ToolCalls, ResponseShapes) {
  ResponseMeta meta{.kind = RequestKind::kChat, .id = "chatcmpl-x", .model = "m", .created = 1, .stream_usage = StreamUsage::kNone};
  protocol::FinalEvent f;
  const std::vector<ToolCall> calls = {{"call_1", "get_weather", R"({"city":"Paris"})"}};
  const json body = json::parse(response_json(meta, {ChoiceOut{0, "", {}, "tool_calls", calls}}, f));
  const json& msg = body["choices"][0]["message"];
  EXPECT_TRUE(msg["content"].is_null());
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(msg["tool_calls"], json::parse(R"([{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}])"));
  const std::string chunk = tool_calls_chunk(meta, "", calls, true, "tool_calls", &f, 0);
  ASSERT_EQ(chunk.rfind("data: ", 0), 0u);
  const json c = json::parse(chunk.substr(6));
  EXPECT_EQ(c["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(c["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
  EXPECT_EQ(c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "tool_calls");
}

}  // namespace
}  // namespace tessera::frontend

namespace tessera::frontend {
namespace {

// tool_choice "required" with several tools: the arguments are checked after the call.
// JSON text that the body's depth check never saw — the model's output, or a JSON text inside a
// string of the body — is held to the body's depth limit too (dump() and the templates recurse
// once per level): deeper, it is not JSON.
std::string nested_objects(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  s += std::string(static_cast<size_t>(depth), '}');
  return s;
}

TEST(ToolCalls, JsonTextNestedPastTheBodyLimitIsNotJson) {
  const std::string ok = nested_objects(8), deep = nested_objects(kMaxBodyJsonDepth + 1);
  // The model's output: a call only while the arguments nest within the limit.
  const std::string call_ok = "<tool_call>{\"name\":\"a\",\"arguments\":" + ok + "}</tool_call>";
  expect_calls(parse_tool_calls(ToolFormat::kHermes, call_ok, false), {{"a", ok}}, "");
  const std::string call_deep = "<tool_call>{\"name\":\"a\",\"arguments\":" + deep + "}</tool_call>";
  ToolParse p = parse_tool_calls(ToolFormat::kHermes, call_deep, false);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, call_deep);
  EXPECT_TRUE(parse_tool_calls(ToolFormat::kMistral, "[TOOL_CALLS][{\"name\":\"a\",\"arguments\":" + deep + "}]", false).calls.empty());
  // An assistant message's arguments string (the body's depth check counts it as one string):
  // kept as the string it is, not parsed.
  for (const std::string& args : {ok, deep}) {
    const json m = {{"role", "assistant"}, {"tool_calls", json::array({{{"id", "c1"}, {"type", "function"},
                                                                     {"function", {{"name", "a"}, {"arguments", args}}}}})}};
    std::string bad;
    auto fields = message_tool_fields(m, "assistant", "messages[0]", &bad);
    ASSERT_TRUE(fields.ok()) << bad;
    const ojson& a = (*fields)["tool_calls"][0]["function"]["arguments"];
    if (args == ok) EXPECT_TRUE(a.is_object());
    else EXPECT_EQ(a, ojson(deep)) << "kept as a string";
  }
  EXPECT_EQ(arguments_violation(ojson::object(), deep), "arguments: nested more than 512 levels deep");
  EXPECT_EQ(arguments_violation(ojson::object(), ok), "");
}

TEST(ToolArguments, ViolationsNameThePlace) {
  const auto params = nlohmann::ordered_json::parse(R"({
    "type": "object",
    "properties": {"city": {"type": "string", "minLength": 2}, "days": {"type": "integer"},
                   "unit": {"enum": ["c", "f"]}, "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 2}},
    "required": ["city"], "additionalProperties": false,
    "$defs": {"tag": {"type": "string"}}})");
  EXPECT_EQ(arguments_violation(params, R"({"days": 3, "city": "Paris"})"), "") << "property order is free";
  EXPECT_EQ(arguments_violation(params, R"({"city": "Paris", "tags": ["a", "b"], "unit": "c"})"), "");
  EXPECT_EQ(arguments_violation(params, R"({"days": 3})"), "arguments.city: required property missing");
  EXPECT_EQ(arguments_violation(params, R"({"city": "P"})"), "arguments.city: shorter than minLength 2");
  EXPECT_EQ(arguments_violation(params, R"({"city": "Paris", "days": "3"})"), "arguments.days: expected integer, got \"3\"");
  EXPECT_EQ(arguments_violation(params, R"({"city": "Paris", "unit": "k"})"), "arguments.unit: must be one of [\"c\",\"f\"]");
  EXPECT_EQ(arguments_violation(params, R"({"city": "Paris", "tags": ["a", 1]})"), "arguments.tags[1]: expected string, got 1");
  EXPECT_EQ(arguments_violation(params, R"({"city": "Paris", "tags": ["a", "b", "c"]})"), "arguments.tags: more than maxItems 2 items");
  EXPECT_EQ(arguments_violation(params, R"({"city": "Paris", "x": 1})"),
            "arguments.x: property not declared (additionalProperties is false)");
  EXPECT_EQ(arguments_violation(params, "{"), "arguments: not JSON");
  EXPECT_EQ(arguments_violation(params, "[]"), "arguments: expected object, got []");
}

TEST(ToolArguments, OnlyRequiredWithSeveralToolsIsChecked) {
  ToolSet one;
  one.names = {"a"};
  one.choice = ToolChoice::kRequired;
  one.chat.tools = nlohmann::ordered_json::array({{{"type", "function"}, {"function", {{"name", "a"}}}}});
  EXPECT_EQ(required_tool_parameters(one), nullptr) << "one tool: the grammar enforces its parameters";
  ToolSet two = one;
  two.names = {"a", "b"};
  two.chat.tools.push_back({{"type", "function"}, {"function", {{"name", "b"}, {"parameters", {{"type", "object"}}}}}});
  auto p = required_tool_parameters(two);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->size(), 2u);
  EXPECT_EQ(p->at("a").parameters, (nlohmann::ordered_json{{"type", "object"}}));
  EXPECT_NE(p->at("b").grammar.find("\"const\":\"b\""), std::string::npos) << p->at("b").grammar;
  two.choice = ToolChoice::kAuto;
  EXPECT_EQ(required_tool_parameters(two), nullptr);
}

}  // namespace
}  // namespace tessera::frontend
