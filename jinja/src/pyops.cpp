// Python semantics of the operators, iteration, indexing and slicing over Values.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "eval.h"

namespace tessera::jinja::internal {
namespace {

Error type_error(const std::string& msg) { return make_error(ErrorCode::kInvalidArgument, msg); }

Result<Value> list_result(std::vector<Value> items, bool tuple) { return Value::list(std::move(items), tuple); }

// PySlice_AdjustIndices.
void adjust(int64_t len, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step, int64_t& b,
            int64_t& e) {
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  b = clamp(start, step < 0 ? len - 1 : 0);
  e = clamp(stop, step < 0 ? -1 : len);
}

// Python's printf-style `str % args` for the conversions templates use: %s %r %d %i %f (with an
// optional precision) and %%.
Result<Value> percent_format(const std::string& fmt, const Value& arg) {
  // A tuple gives the arguments; anything else is the one argument. Python does not complain
  // about an unused argument that has __getitem__ (a list, a dict, jinja2's Undefined).
  std::vector<Value> args;
  const bool mapping = arg.is_dict() || arg.is_undefined() || (arg.is_list() && !arg.is_tuple());
  if (arg.is_tuple()) args = arg.as_list();
  else args.push_back(arg);
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) return type_error("incomplete format");
    int precision = -1;
    if (fmt[i] == '.') {
      precision = 0;
      while (++i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
        precision = std::min(precision * 10 + (fmt[i] - '0'), 100);
      }
      if (i >= fmt.size()) return type_error("incomplete format");
    }
    char c = fmt[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (c != 's' && c != 'r' && c != 'd' && c != 'i' && c != 'f') {
      return type_error(std::string("unsupported format character '") + c + "'");
    }
    if (next >= args.size()) return type_error("not enough arguments for format string");
    const Value& v = args[next++];
    if (c == 's') {
      out += to_str(v);
    } else if (c == 'r') {
      out += to_repr(v);
    } else {
      if (!v.is_number()) {
        return type_error(std::string("%") + c + " format: a real number is required, not " + type_name(v));
      }
      if (c == 'f') {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%.*f", precision < 0 ? 6 : precision, v.as_float());
        out += buf;
      } else {
        out += std::to_string(v.is_float() ? static_cast<int64_t>(v.as_float()) : v.as_int());
      }
    }
  }
  if (!mapping && next < args.size()) return type_error("not all arguments converted during string formatting");
  return Value(std::move(out));
}

}  // namespace

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict: return v.is_namespace() ? "Namespace" : "dict";
    case Value::Kind::kCallable: return "function";
  }
  return "object";
}

Result<std::vector<Value>> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return std::vector<Value>{};
    case Value::Kind::kList: return v.as_list();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, x] : v.as_dict().items()) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      auto cps = utf8_decode(v.as_string());
      for (size_t i = 0; i < cps.size(); ++i) chars.emplace_back(utf8_encode(cps, i, i + 1));
      return chars;
    }
    default: return type_error("'" + type_name(v) + "' object is not iterable");
  }
}

Result<int64_t> length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return int64_t{0};
    case Value::Kind::kString: return static_cast<int64_t>(utf8_decode(v.as_string()).size());
    case Value::Kind::kList: return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.as_dict().size());
    default: return type_error("object of type '" + type_name(v) + "' has no len()");
  }
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return type_error("'in <string>' requires string as left operand, not " + type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& x : container.as_list()) {
        if (equals(x, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if ((item.is_list() && !item.is_tuple()) || item.is_dict()) {
        return type_error("unhashable type: '" + type_name(item) + "'");
      }
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default: return type_error("argument of type '" + type_name(container) + "' is not iterable");
  }
}

Result<int> compare_values(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare_values(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined() || b.is_undefined()) {
    return type_error((a.is_undefined() ? a : b).undefined_hint());
  }
  return type_error(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" +
                    type_name(b) + "'");
}

Result<Value> arithmetic(const std::string& op, const Value& a, const Value& b, size_t max_bytes) {
  if (a.is_undefined()) return type_error(a.undefined_hint());
  if (op == "%" && a.is_string()) return percent_format(a.as_string(), b);
  if (b.is_undefined()) return type_error(b.undefined_hint());
  auto unsupported = [&]() {
    return type_error("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  if (a.is_number() && b.is_number()) {
    bool fl = a.is_float() || b.is_float();
    if (op == "/") {
      if (b.as_float() == 0) return type_error("division by zero");
      return Value(a.as_float() / b.as_float());
    }
    if (fl) {
      double x = a.as_float(), y = b.as_float();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (op == "**") {
        if (x == 0 && y < 0) return type_error("0.0 cannot be raised to a negative power");
        return Value(std::pow(x, y));
      }
      if (y == 0) return type_error("float division by zero");
      if (op == "//") return Value(std::floor(x / y));
      if (op == "%") {
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value(m);
      }
      return unsupported();
    }
    int64_t x = a.as_int(), y = b.as_int(), r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) return type_error("integer overflow");
      return Value(r);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) return type_error("integer overflow");
      return Value(r);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) return type_error("integer overflow");
      return Value(r);
    }
    if (op == "**") {
      if (y < 0) {
        if (x == 0) return type_error("0.0 cannot be raised to a negative power");
        return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      r = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(r, x, &r)) return type_error("integer overflow");
        if (r == 0 || r == 1) break;
      }
      return Value(r);
    }
    if (y == 0) return type_error("integer division or modulo by zero");
    if (op == "//" || op == "%") {
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return op == "//" ? Value(q) : Value(m);
    }
    return unsupported();
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > max_bytes) return type_error("string too large");
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      if (a.as_list().size() + b.as_list().size() > max_bytes) return type_error("list too large");
      std::vector<Value> items = a.as_list();
      items.insert(items.end(), b.as_list().begin(), b.as_list().end());
      return list_result(std::move(items), a.is_tuple());
    }
    if (a.is_string() || b.is_string()) {
      return type_error(a.is_string() ? "can only concatenate str (not \"" + type_name(b) + "\") to str"
                                      : "unsupported operand type(s) for +: '" + type_name(a) + "' and 'str'");
    }
    return unsupported();
  }
  const bool a_count = a.is_int() || a.is_bool(), b_count = b.is_int() || b.is_bool();
  if (op == "*" && (a_count || b_count) && (a.is_string() || b.is_string() || a.is_list() || b.is_list())) {
    const Value& seq = a_count ? b : a;
    int64_t n = std::max<int64_t>(0, (a_count ? a : b).as_int());
    size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
    if (unit != 0 && static_cast<uint64_t>(n) > max_bytes / unit) return type_error("repeated sequence too large");
    if (seq.is_string()) {
      std::string s;
      for (int64_t i = 0; i < n; ++i) s += seq.as_string();
      return Value(std::move(s));
    }
    std::vector<Value> items;
    for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq.as_list().begin(), seq.as_list().end());
    return list_result(std::move(items), seq.is_tuple());
  }
  return unsupported();
}

Result<Value> slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                    std::optional<int64_t> step_opt) {
  int64_t step = step_opt.value_or(1);
  if (step == 0) return type_error("slice step cannot be zero");
  auto pick = [&](int64_t len, auto&& take) {
    int64_t b = 0, e = 0;
    adjust(len, start, stop, step, b, e);
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step) take(static_cast<size_t>(i));
  };
  if (obj.is_string()) {
    auto cps = utf8_decode(obj.as_string());
    std::vector<uint32_t> out;
    pick(static_cast<int64_t>(cps.size()), [&](size_t i) { out.push_back(cps[i]); });
    return Value(utf8_encode(out));
  }
  if (obj.is_list()) {
    const auto& items = obj.as_list();
    std::vector<Value> out;
    pick(static_cast<int64_t>(items.size()), [&](size_t i) { out.push_back(items[i]); });
    return list_result(std::move(out), obj.is_tuple());
  }
  return type_error("'" + type_name(obj) + "' object is not subscriptable");
}

Result<Value> get_item(const Value& obj, const Value& key) {
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
    return get_attr(obj, key.as_string());
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("list object has no element " + std::to_string(key.as_int()));
      return obj.as_list()[static_cast<size_t>(i)];
    }
    auto cps = utf8_decode(obj.as_string());
    const auto n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("str object has no element " + std::to_string(key.as_int()));
    return Value(utf8_encode(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + to_str(key) + "'");
}

}  // namespace tessera::jinja::internal
