// arguments_violation (tool_calls.h): a tool call's arguments against its parameters schema.
#include "tessera/frontend/tool_calls.h"

#include "tessera/common/json_depth.h"
#include "tessera/frontend/openai.h"

#include <algorithm>
#include <cstdint>

namespace tessera::frontend {
namespace {

using ojson = nlohmann::ordered_json;

bool has_type(const ojson& v, const std::string& t) {
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())));
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

class Checker {
 public:
  explicit Checker(const ojson& root) : root_(root) {}

  std::string check(const ojson& schema, const ojson& v, const std::string& at, int depth) const {
    if (depth > 64) return at + ": schema nested too deeply";
    if (schema.is_boolean()) return schema.get<bool>() ? "" : at + ": no value is allowed here";
    if (!schema.is_object()) return "";
    if (auto ref = schema.find("$ref"); ref != schema.end() && ref->is_string()) {
      const ojson* target = resolve(ref->get<std::string>());
      if (target == nullptr) return at + ": unresolved $ref " + ref->get<std::string>();
      return check(*target, v, at, depth + 1);
    }
    if (auto t = schema.find("type"); t != schema.end()) {
      bool ok = false;
      std::string names;
      for (const auto& n : t->is_array() ? *t : ojson::array({*t})) {
        if (!n.is_string()) continue;
        ok = ok || has_type(v, n.get<std::string>());
        names += (names.empty() ? "" : " or ") + n.get<std::string>();
      }
      if (!ok) return at + ": expected " + names + ", got " + v.dump();
    }
    if (auto c = schema.find("const"); c != schema.end() && *c != v) return at + ": must be " + c->dump();
    if (auto e = schema.find("enum"); e != schema.end() && e->is_array() && std::find(e->begin(), e->end(), v) == e->end())
      return at + ": must be one of " + e->dump();
    for (const char* key : {"anyOf", "oneOf"}) {
      auto opts = schema.find(key);
      if (opts == schema.end() || !opts->is_array()) continue;
      std::string first;
      bool any = false;
      for (const auto& o : *opts) {
        std::string why = check(o, v, at, depth + 1);
        if (why.empty()) any = true;
        else if (first.empty()) first = why;
      }
      if (!any) return at + ": matches none of " + key + " (first: " + first + ")";
    }
    if (v.is_string()) {
      const int64_t n = code_points(v.get<std::string>());
      if (auto m = schema.find("minLength"); m != schema.end() && m->is_number() && n < m->get<int64_t>())
        return at + ": shorter than minLength " + m->dump();
      if (auto m = schema.find("maxLength"); m != schema.end() && m->is_number() && n > m->get<int64_t>())
        return at + ": longer than maxLength " + m->dump();
    }
    if (v.is_array()) {
      const auto n = static_cast<int64_t>(v.size());
      if (auto m = schema.find("minItems"); m != schema.end() && m->is_number() && n < m->get<int64_t>())
        return at + ": fewer than minItems " + m->dump() + " items";
      if (auto m = schema.find("maxItems"); m != schema.end() && m->is_number() && n > m->get<int64_t>())
        return at + ": more than maxItems " + m->dump() + " items";
      if (auto items = schema.find("items"); items != schema.end())
        for (size_t i = 0; i < v.size(); ++i)
          if (std::string why = check(*items, v[i], at + "[" + std::to_string(i) + "]", depth + 1); !why.empty()) return why;
    }
    if (v.is_object()) {
      const auto props = schema.find("properties");
      if (auto req = schema.find("required"); req != schema.end() && req->is_array())
        for (const auto& k : *req)
          if (k.is_string() && !v.contains(k.get<std::string>())) return at + "." + k.get<std::string>() + ": required property missing";
      const auto extra = schema.find("additionalProperties");
      for (const auto& [k, value] : v.items()) {
        const std::string here = at + "." + k;
        if (props != schema.end() && props->is_object() && props->contains(k)) {
          if (std::string why = check((*props)[k], value, here, depth + 1); !why.empty()) return why;
        } else if (extra != schema.end()) {
          if (extra->is_boolean() && !extra->get<bool>()) return here + ": property not declared (additionalProperties is false)";
          if (std::string why = check(*extra, value, here, depth + 1); !why.empty()) return why;
        }
      }
    }
    return "";
  }

 private:
  const ojson* resolve(const std::string& ref) const {
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (ref.rfind(p, 0) != 0) continue;
      const std::string section = p.substr(2, p.size() - 3);
      auto s = root_.find(section);
      if (s == root_.end() || !s->is_object()) return nullptr;
      auto t = s->find(ref.substr(p.size()));
      return t == s->end() ? nullptr : &*t;
    }
    return nullptr;
  }
  const ojson& root_;
};

}  // namespace

std::string arguments_violation(const nlohmann::ordered_json& parameters, std::string_view arguments) {
  if (json_nesting_depth(arguments, kMaxBodyJsonDepth) > kMaxBodyJsonDepth)
    return "arguments: nested more than " + std::to_string(kMaxBodyJsonDepth) + " levels deep";
  const ojson v = ojson::parse(arguments, nullptr, false);
  if (v.is_discarded()) return "arguments: not JSON";
  return Checker(parameters).check(parameters, v, "arguments", 0);
}

}  // namespace tessera::frontend
