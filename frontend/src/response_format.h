// Private: the OpenAI request field response_format (docs/api.md "Structured output").
// {"type": "text"} asks for nothing; {"type": "json_object"} and
// {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} set SamplingParams::grammar
// to a JSON Schema text. The schema is compiled here (tessera/grammar/grammar.h) so that a schema
// outside the supported subset is a 400 naming the keyword and its path; the worker compiles the
// same text again. Errors: kInvalidArgument / kUnsupported / kTooLarge (the caller names the
// param). A pure function of its inputs; thread-safe.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"

namespace tessera::frontend {

// `value`: the request's response_format (not null); `body_text`: the whole request body, re-read
// with key order kept (properties are generated in the schema's order).
Status parse_response_format(const nlohmann::json& value, std::string_view body_text, SamplingParams* sp);

}  // namespace tessera::frontend
