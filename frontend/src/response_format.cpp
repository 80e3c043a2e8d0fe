#include "response_format.h"

#include <string>

#include "tessera/grammar/grammar.h"

namespace tessera::frontend {

Status parse_response_format(const nlohmann::json& value, std::string_view body_text, SamplingParams* sp) {
  const nlohmann::json* rf = &value;
  if (!rf->is_object()) return make_error(ErrorCode::kInvalidArgument, "'response_format' must be an object");
  const auto type = rf->find("type");
  if (type == rf->end() || !type->is_string())
    return make_error(ErrorCode::kInvalidArgument, "response_format.type must be \"text\", \"json_object\" or \"json_schema\"");
  const std::string t = type->get<std::string>();
  if (t == "text") return ok_status();
  if (t == "json_object") {
    sp->grammar = std::string(grammar::kJsonObjectSchema);
    return ok_status();
  }
  if (t != "json_schema")
    return make_error(ErrorCode::kInvalidArgument, "response_format.type '" + t + "' is not one of text, json_object, json_schema");
  const auto js = rf->find("json_schema");
  if (js == rf->end() || !js->is_object())
    return make_error(ErrorCode::kInvalidArgument, "response_format.json_schema must be an object with a 'schema'");
  const auto name = js->find("name");
  if (name != js->end() && !name->is_string())
    return make_error(ErrorCode::kInvalidArgument, "response_format.json_schema.name must be a string");
  const auto strict = js->find("strict");
  if (strict != js->end() && !strict->is_boolean() && !strict->is_null())
    return make_error(ErrorCode::kInvalidArgument, "response_format.json_schema.strict must be a boolean");
  const auto schema = js->find("schema");
  if (schema == js->end() || !(schema->is_object() || schema->is_boolean()))
    return make_error(ErrorCode::kInvalidArgument, "response_format.json_schema.schema must be a JSON Schema object");
  // Properties are generated in the schema's order: re-read the body keeping object key order
  // (the request's json sorts keys).
  const auto ordered = nlohmann::ordered_json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  std::string text = schema->dump();
  if (ordered.is_object() && ordered.contains("response_format") && ordered["response_format"].is_object() &&
      ordered["response_format"].contains("json_schema") && ordered["response_format"]["json_schema"].is_object() &&
      ordered["response_format"]["json_schema"].contains("schema"))
    text = ordered["response_format"]["json_schema"]["schema"].dump();
  if (text.size() > kMaxGrammarBytes)
    return make_error(ErrorCode::kTooLarge, "response_format.json_schema.schema is " + std::to_string(text.size()) +
                                                " bytes; at most " + std::to_string(kMaxGrammarBytes) + " are allowed");
  auto compiled = grammar::compile_json_schema(text);
  if (!compiled.ok())
    return make_error(compiled.error().code, "response_format.json_schema.schema" + compiled.error().message);
  sp->grammar = std::move(text);
  return ok_status();
}

}  // namespace tessera::frontend
