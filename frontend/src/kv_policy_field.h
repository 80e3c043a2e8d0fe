// Private: the Tessera request field kv_policy (docs/api.md, docs/kv.md):
//   {"type": "none"} | {"type": "streaming", "sinks": int = 4, "window": int}
//   | {"type": "h2o", "budget": int, "recent": int = budget / 2}
// Types and unknown keys are refused here (kInvalidArgument naming kv_policy.<key>); ranges
// by kv_policy_error (common/step_plan.h), the context bound once it is known (request
// preparation). A pure function of its input; thread-safe.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"

namespace tessera::frontend {

Status parse_kv_policy(const nlohmann::json& value, KvPolicy* out);

// The --kv-policy option: "none", "streaming:SINKS:WINDOW" or "h2o:BUDGET:RECENT" (ranges as
// for the field; the context is checked per request). kInvalidArgument naming the form.
Result<KvPolicy> parse_kv_policy_spec(std::string_view spec);

}  // namespace tessera::frontend
