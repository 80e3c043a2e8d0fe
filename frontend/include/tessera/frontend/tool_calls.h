// Tool calls (docs/api.md "Tool calls"): the OpenAI request fields tools / tool_choice /
// parallel_tool_calls, the grammar that forces a call, and the parsers that turn generated text
// back into OpenAI's message.tool_calls.
//
// Formats (picked from the chat template's text by tool_format_for_template; a template without
// tool support gets the Hermes fallback block, so its output is parsed as Hermes):
//   kHermes  (Hermes, Qwen2/2.5/3, SmolLM3):   <tool_call>{"name": .., "arguments": {..}}</tool_call>
//   kLlama3  (Llama 3.1/3.2/3.3 JSON calls):   [<|python_tag|>]{"name": .., "parameters": {..}}[; {...}]
//   kMistral (Mistral v0.3+ / Nemo):           [TOOL_CALLS][{"name": .., "arguments": {..}}, ...]
// A forced call (tool_choice required or named) is generated under a JSON Schema grammar as a
// bare {"name": .., "arguments": ..} object, whatever the format, and parsed as such.
// Text that does not parse completely as the format's calls stays plain content.
//
// Pure functions; thread-safe (random call ids use a thread_local generator).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/common/result.h"
#include "tessera/frontend/chat_template.h"

namespace tessera::frontend {

enum class ToolChoice : uint8_t { kNone, kAuto, kRequired, kNamed };

// The tool fields of one chat request.
struct ToolSet {
  ChatTools chat;                  // what the chat template gets (tools + each message's extras)
  std::vector<std::string> names;  // declared function names, in order
  ToolChoice choice = ToolChoice::kNone;
  std::string forced_name;         // kNamed: the function
  bool parallel = true;            // parallel_tool_calls
  bool active() const { return !names.empty() && choice != ToolChoice::kNone; }
  bool forced() const { return choice == ToolChoice::kRequired || choice == ToolChoice::kNamed; }
};

// Reads tools / tool_choice / parallel_tool_calls of `body` (key order re-read from `body_text`
// so each tool's parameters keep their property order). Each tool's parameters must compile as
// a grammar (tessera/grammar/grammar.h) when the call can be forced. Errors: kInvalidArgument /
// kUnsupported, `bad_param` naming the field ("tools[1].function.name", "tool_choice").
Status parse_tools(const nlohmann::json& body, std::string_view body_text, ToolSet* out, std::string* bad_param);

// The JSON Schema a forced call is generated under: {"name": const, "arguments": the tool's
// parameters} for a named tool or `required` with one tool; `required` with several tools:
// {"name": enum of the names, "arguments": any object} (the grammar cannot branch on the name).
std::string forcing_schema(const ToolSet& tools);

// tool_choice "required" with several tools: each tool's `parameters` and forcing grammar by name
// (the grammar fixes only the name, so the arguments are checked when the choice ends, and a
// call they do not match is generated again with that tool named); null otherwise.
struct RequiredTool {
  nlohmann::ordered_json parameters;  // to check a call's arguments
  std::string grammar;                // forcing_schema of this tool alone (a retry named it)
};
std::shared_ptr<const std::map<std::string, RequiredTool>> required_tool_parameters(const ToolSet& tools);

// "" when `arguments` (JSON text) is a value the tool's `parameters` schema accepts; else what is
// wrong, naming the place ("arguments.city: required property missing"). The grammar's JSON
// Schema subset (type, properties, required, additionalProperties, items, minItems, maxItems,
// minLength, maxLength, enum, const, anyOf, oneOf, $ref to #/$defs or #/definitions); property
// order is free; annotations are ignored (tool_arguments.cpp).
std::string arguments_violation(const nlohmann::ordered_json& parameters, std::string_view arguments);

struct ToolCall {
  std::string id;         // "call_" + 24 random hex digits
  std::string name;
  std::string arguments;  // a JSON text (OpenAI's function.arguments string)
};

struct ToolParse {
  std::vector<ToolCall> calls;  // empty: no call; `content` is the whole text
  std::string content;          // text outside the calls (trimmed); "" = none
};

ToolParse parse_tool_calls(ToolFormat format, std::string_view text, bool forced);

// Streaming a forced call (docs/api.md "Tool calls"): where the arguments start in the grammar's
// compact output `{"name":"<name>","arguments":...` once the name is complete (npos before),
// setting *name; a forced call's `arguments` are that text up to the last '}' (exclusive).
size_t forced_arguments_start(std::string_view text, std::string* name);
std::string new_call_id();  // "call_" + 24 random hex digits

// The tool fields of one request message (docs/api.md "Tool calls"): an assistant's tool_calls
// (arguments that are JSON text become objects, as HF templates expect), a tool message's
// tool_call_id (required) and name. `at` is "messages[i]", named in errors.
Result<nlohmann::ordered_json> message_tool_fields(const nlohmann::json& m, const std::string& role, const std::string& at,
                                                   std::string* bad_param);
// OpenAI's tool_calls array; `indexed`: stream deltas carry each call's "index".
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, bool indexed);

}  // namespace tessera::frontend
