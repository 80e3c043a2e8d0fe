// Private: POST /tokenize and /detokenize (docs/api.md), in the shapes of vLLM and llama-server.
//   /tokenize   {"prompt" | "content": str, "add_special_tokens": bool = true} or
//               {"messages": [...]} (the chat template applied, as a chat request would be)
//               -> {"tokens": [int], "count": int, "max_model_len": int}
//   /detokenize {"tokens": [int]} -> {"prompt": str, "content": str}
// Errors: kInvalidArgument / kMalformedMessage / kOutOfRange with `param` naming the field.
// Pure functions of their inputs; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "tessera/common/result.h"
#include "tessera/frontend/request_preparer.h"

namespace tessera::frontend {

Result<std::string> tokenize_json(std::string_view body, const RequestPreparer& preparer, const ServingLimits& limits,
                                  std::string* param);
Result<std::string> detokenize_json(std::string_view body, const RequestPreparer& preparer, std::string* param);

}  // namespace tessera::frontend
