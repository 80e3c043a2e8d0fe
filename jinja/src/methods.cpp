// Attribute lookup: dict keys, the str and dict methods templates call, and the built-in
// globals (range, namespace, dict, raise_exception, strftime_now).
#include <ctime>

#include "eval.h"
#include "py_strings.h"

namespace tessera::jinja::internal {
namespace {

Error arg_error(const std::string& msg) { return make_error(ErrorCode::kInvalidArgument, msg); }

const Value* arg(const CallArgs& a, size_t i, std::string_view name) {
  if (i < a.positional.size()) return &a.positional[i];
  return a.kw(name);
}

Result<std::string> str_arg(const CallArgs& a, size_t i, std::string_view name, const std::string& method) {
  const Value* v = arg(a, i, name);
  if (v == nullptr || !v->is_string()) {
    return arg_error(method + "() argument '" + std::string(name) + "' must be str");
  }
  return v->as_string();
}

// startswith/endswith accept a str or a tuple of str.
Result<Value> affix(const std::string& s, const CallArgs& a, bool start, const std::string& method) {
  const Value* v = arg(a, 0, "prefix");
  if (v == nullptr) return arg_error(method + "() takes at least 1 argument (0 given)");
  std::vector<Value> options = v->is_list() ? v->as_list() : std::vector<Value>{*v};
  for (const Value& o : options) {
    if (!o.is_string()) return arg_error(method + " first arg must be str or a tuple of str, not " + type_name(o));
    const std::string& p = o.as_string();
    if (p.size() <= s.size() && s.compare(start ? 0 : s.size() - p.size(), p.size(), p) == 0) return Value(true);
  }
  return Value(false);
}

Result<Value> string_method(const std::string& s, const std::string& name, const CallArgs& a) {
  auto chars = [&](size_t i) -> std::optional<std::string> {
    const Value* v = arg(a, i, "chars");
    if (v == nullptr || v->is_none()) return std::nullopt;
    return v->is_string() ? std::optional<std::string>(v->as_string()) : std::nullopt;
  };
  if (name == "strip") return Value(py_strip(s, chars(0), true, true));
  if (name == "lstrip") return Value(py_strip(s, chars(0), true, false));
  if (name == "rstrip") return Value(py_strip(s, chars(0), false, true));
  if (name == "upper") return Value(ascii_upper(s));
  if (name == "lower") return Value(ascii_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "startswith") return affix(s, a, true, name);
  if (name == "endswith") return affix(s, a, false, name);
  if (name == "split" || name == "rsplit") {
    const Value* sep = arg(a, 0, "sep");
    const Value* maxv = arg(a, 1, "maxsplit");
    int64_t max = maxv != nullptr && maxv->is_int() ? maxv->as_int() : -1;
    if (sep != nullptr && !sep->is_none()) {
      if (!sep->is_string()) return arg_error("must be str or None, not " + type_name(*sep));
      if (sep->as_string().empty()) return arg_error("empty separator");
    }
    std::optional<std::string> sp;
    if (sep != nullptr && sep->is_string()) sp = sep->as_string();
    std::vector<Value> parts;
    for (auto& p : py_split(s, sp, max, name == "rsplit")) parts.emplace_back(std::move(p));
    return Value::list(std::move(parts));
  }
  if (name == "splitlines") {
    std::vector<Value> parts;
    for (auto& p : py_split_lines(s)) parts.emplace_back(std::move(p));
    return Value::list(std::move(parts));
  }
  if (name == "replace") {
    TS_ASSIGN_OR_RETURN(std::string from, str_arg(a, 0, "old", name));
    TS_ASSIGN_OR_RETURN(std::string to, str_arg(a, 1, "new", name));
    const Value* count = arg(a, 2, "count");
    return Value(py_replace(s, from, to, count != nullptr && count->is_int() ? count->as_int() : -1));
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    TS_ASSIGN_OR_RETURN(std::string sub, str_arg(a, 0, "sub", name));
    if (name == "count") return Value(py_count(s, sub));
    size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name == "index") return arg_error("substring not found");
      return Value(int64_t{-1});
    }
    return Value(static_cast<int64_t>(utf8_decode(std::string_view(s).substr(0, p)).size()));
  }
  if (name == "join") {
    const Value* v = arg(a, 0, "iterable");
    if (v == nullptr) return arg_error("join() takes exactly one argument (0 given)");
    TS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(*v));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return arg_error("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(items[i]) +
                         " found");
      }
      if (i) out += s;
      out += items[i].as_string();
    }
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" || name == "islower" ||
      name == "isupper") {
    return Value(py_is(s, name));
  }
  return arg_error("'str' object has no attribute '" + name + "'");
}

bool is_string_method(const std::string& n) {
  static const char* kNames[] = {"strip",    "lstrip",  "rstrip",  "upper",   "lower",   "title",  "capitalize",
                                 "startswith", "endswith", "split", "rsplit", "splitlines", "replace", "find",
                                 "rfind",    "count",   "index",   "join",    "isdigit", "isalpha", "isspace",
                                 "isalnum",  "islower", "isupper"};
  for (const char* k : kNames) {
    if (n == k) return true;
  }
  return false;
}

Result<Value> dict_method(const Value& d, const std::string& name, const CallArgs& a) {
  if (name == "items") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.as_dict().items()) out.push_back(Value::list({Value(k), v}, true));
    return Value::list(std::move(out));
  }
  if (name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.as_dict().items()) out.push_back(name == "keys" ? Value(k) : v);
    return Value::list(std::move(out));
  }
  // get
  const Value* key = arg(a, 0, "key");
  if (key == nullptr) return arg_error("get expected at least 1 argument, got 0");
  if (key->is_string()) {
    if (const Value* v = d.as_dict().find(key->as_string())) return *v;
  }
  const Value* dflt = arg(a, 1, "default");
  return dflt != nullptr ? *dflt : Value::none();
}

}  // namespace

Result<Value> get_attr(const Value& obj, const std::string& name) {
  if (obj.is_dict()) {
    if (!obj.is_namespace() && (name == "items" || name == "keys" || name == "values" || name == "get")) {
      Value self = obj;
      return Value::callable("dict." + name, [self, name](const CallArgs& a) { return dict_method(self, name, a); });
    }
    if (const Value* v = obj.as_dict().find(name)) return *v;
    return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
  }
  if (obj.is_string() && is_string_method(name)) {
    std::string self = obj.as_string();
    return Value::callable("str." + name,
                           [self, name](const CallArgs& a) { return string_method(self, name, a); });
  }
  if (obj.is_list() && (name == "append" || name == "pop" || name == "insert" || name == "extend" ||
                        name == "remove" || name == "clear" || name == "sort" || name == "reverse")) {
    return Value::callable("list." + name, [name](const CallArgs&) -> Result<Value> {
      return make_error(ErrorCode::kInvalidArgument,
                        "access to attribute '" + name + "' of 'list' object is unsafe (templates are immutable)");
    });
  }
  return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
}

void add_builtin_globals(Dict& g, uint64_t max_range) {
  g.set("range", Value::callable("range", [max_range](const CallArgs& a) -> Result<Value> {
          int64_t start = 0, stop = 0, step = 1;
          for (const Value& v : a.positional) {
            if (!v.is_int() && !v.is_bool()) return arg_error("range() integer argument expected, got " + type_name(v));
          }
          if (a.positional.size() == 1) {
            stop = a.positional[0].as_int();
          } else if (a.positional.size() >= 2 && a.positional.size() <= 3) {
            start = a.positional[0].as_int();
            stop = a.positional[1].as_int();
            if (a.positional.size() == 3) step = a.positional[2].as_int();
          } else {
            return arg_error("range expected 1 to 3 arguments, got " + std::to_string(a.positional.size()));
          }
          if (step == 0) return arg_error("range() arg 3 must not be zero");
          std::vector<Value> out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (out.size() >= max_range) return make_error(ErrorCode::kResourceExhausted, "range() too large");
            out.emplace_back(i);
          }
          return Value::list(std::move(out));
        }));
  g.set("namespace", Value::callable("namespace", [](const CallArgs& a) -> Result<Value> {
          Dict d;
          for (const Value& p : a.positional) {
            if (!p.is_dict()) return arg_error("namespace() positional argument must be a dict");
            for (const auto& [k, v] : p.as_dict().items()) d.set(k, v);
          }
          for (const auto& [k, v] : a.keyword) d.set(k, v);
          return Value::namespace_object(std::move(d));
        }));
  g.set("dict", Value::callable("dict", [](const CallArgs& a) -> Result<Value> {
          Dict d;
          for (const Value& p : a.positional) {
            if (!p.is_dict()) return arg_error("dict() positional argument must be a dict");
            for (const auto& [k, v] : p.as_dict().items()) d.set(k, v);
          }
          for (const auto& [k, v] : a.keyword) d.set(k, v);
          return Value::dict(std::move(d));
        }));
  g.set("raise_exception", Value::callable("raise_exception", [](const CallArgs& a) -> Result<Value> {
          std::string msg = a.positional.empty() ? "" : to_str(a.positional[0]);
          return make_error(ErrorCode::kInvalidArgument, "raise_exception: " + msg);
        }));
  g.set("strftime_now", Value::callable("strftime_now", [](const CallArgs& a) -> Result<Value> {
          if (a.positional.empty() || !a.positional[0].is_string()) {
            return arg_error("strftime_now() takes a format string");
          }
          std::time_t t = std::time(nullptr);
          std::tm tm{};
          localtime_r(&t, &tm);
          char buf[256];
          size_t n = std::strftime(buf, sizeof buf, a.positional[0].as_string().c_str(), &tm);
          return Value(std::string(buf, n));
        }));
}

}  // namespace tessera::jinja::internal
