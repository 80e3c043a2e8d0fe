// The request field kv_policy (kv_policy_field.h).
#include "kv_policy_field.h"

#include <cstdio>
#include <string>

namespace tessera::frontend {
namespace {

Error bad(const std::string& msg) { return make_error(ErrorCode::kInvalidArgument, msg); }

Status read_int(const nlohmann::json& obj, const char* key, int32_t* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return ok_status();
  if (!it->is_number_integer() || it->get<int64_t>() < INT32_MIN || it->get<int64_t>() > INT32_MAX) {
    return bad(std::string("kv_policy.") + key + " must be an integer");
  }
  *out = static_cast<int32_t>(it->get<int64_t>());
  return ok_status();
}

}  // namespace

Status parse_kv_policy(const nlohmann::json& value, KvPolicy* out) {
  if (!value.is_object()) return bad("kv_policy must be an object such as {\"type\": \"streaming\", \"window\": 256}");
  auto type = value.find("type");
  if (type == value.end() || !type->is_string()) return bad("kv_policy.type must be \"none\", \"streaming\" or \"h2o\"");
  const std::string t = type->get<std::string>();
  KvPolicy k;
  const char* allowed_a = nullptr;
  const char* allowed_b = nullptr;
  if (t == "none") {
  } else if (t == "streaming") {
    k.type = KvPolicyType::kStreaming;
    k.sinks = 4;
    allowed_a = "sinks";
    allowed_b = "window";
    if (!value.contains("window")) return bad("kv_policy.window is required for type streaming");
    TS_TRY(read_int(value, "sinks", &k.sinks));
    TS_TRY(read_int(value, "window", &k.window));
  } else if (t == "h2o") {
    k.type = KvPolicyType::kH2O;
    allowed_a = "budget";
    allowed_b = "recent";
    if (!value.contains("budget")) return bad("kv_policy.budget is required for type h2o");
    TS_TRY(read_int(value, "budget", &k.budget));
    k.recent = k.budget / 2;
    TS_TRY(read_int(value, "recent", &k.recent));
  } else {
    return bad("kv_policy.type must be \"none\", \"streaming\" or \"h2o\" (got \"" + t + "\")");
  }
  for (const auto& [key, v] : value.items()) {
    if (key == "type" || (allowed_a != nullptr && (key == allowed_a || key == allowed_b))) continue;
    return bad("kv_policy." + key + " is not a field of kv_policy type " + t);
  }
  if (std::string e = kv_policy_error(k, 0); !e.empty()) return make_error(ErrorCode::kOutOfRange, e);
  *out = k;
  return ok_status();
}

Result<KvPolicy> parse_kv_policy_spec(std::string_view spec) {
  const std::string s(spec);
  KvPolicy k;
  int a = 0, b = 0;
  char tail = 0;
  if (s == "none") return k;
  if (std::sscanf(s.c_str(), "streaming:%d:%d%c", &a, &b, &tail) == 2) {
    k = {.type = KvPolicyType::kStreaming, .sinks = a, .window = b};
  } else if (std::sscanf(s.c_str(), "h2o:%d:%d%c", &a, &b, &tail) == 2) {
    k = {.type = KvPolicyType::kH2O, .budget = a, .recent = b};
  } else {
    return bad("'" + s + "' is not none, streaming:SINKS:WINDOW or h2o:BUDGET:RECENT");
  }
  if (std::string e = kv_policy_error(k, 0); !e.empty()) return bad("'" + s + "': " + e);
  return k;
}

}  // namespace tessera::frontend
