// The filters and tests real chat templates use, with jinja2's behaviour (and transformers'
// `tojson`: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)).
#include <algorithm>
#include <cmath>

#include "eval.h"
#include "py_strings.h"

namespace tessera::jinja::internal {
namespace {

Error bad(const std::string& msg) { return make_error(ErrorCode::kInvalidArgument, msg); }

const Value* arg(const CallArgs& a, size_t i, std::string_view name) {
  if (i < a.positional.size()) return &a.positional[i];
  return a.kw(name);
}

CallArgs rest_args(const CallArgs& a, size_t from) {
  CallArgs out;
  for (size_t i = from; i < a.positional.size(); ++i) out.positional.push_back(a.positional[i]);
  out.keyword = a.keyword;
  return out;
}

// jinja2's attribute getter: "a.b.0" walks items/attributes, digits index lists.
Result<Value> attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (cur.is_undefined()) return cur;
    TS_ASSIGN_OR_RETURN(cur, digits ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part))))
                                    : get_item(cur, Value(part)));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Result<Value> to_int(const Value& v, const Value& dflt) {
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return Value(static_cast<int64_t>(v.as_float()));
  if (v.is_string()) {
    std::string s = py_strip(v.as_string(), std::nullopt, true, true);
    try {
      size_t used = 0;
      long long i = std::stoll(s, &used, 10);
      if (used == s.size()) return Value(static_cast<int64_t>(i));
      double d = std::stod(s, &used);
      if (used == s.size()) return Value(static_cast<int64_t>(d));
    } catch (...) {
    }
  }
  return dflt;
}

Result<Value> tojson(const Value& v, const CallArgs& a) {
  JsonOptions o;
  if (const Value* x = arg(a, 0, "ensure_ascii")) o.ensure_ascii = x->truthy();
  if (const Value* x = arg(a, 1, "indent"); x != nullptr && !x->is_none()) {
    if (!x->is_int()) return bad("tojson: indent must be an integer");
    o.indent = static_cast<int>(std::clamp<int64_t>(x->as_int(), 0, 64));
  }
  if (const Value* x = arg(a, 2, "separators"); x != nullptr && !x->is_none()) {
    if (!x->is_list() || x->as_list().size() != 2 || !x->as_list()[0].is_string() || !x->as_list()[1].is_string()) {
      return bad("tojson: separators must be a pair of strings");
    }
    o.item_separator = x->as_list()[0].as_string();
    o.key_separator = x->as_list()[1].as_string();
    if (o.item_separator.empty()) o.item_separator = "\x01";  // marks "explicitly empty"
  }
  if (const Value* x = arg(a, 3, "sort_keys")) o.sort_keys = x->truthy();
  TS_ASSIGN_OR_RETURN(std::string s, to_json(v, o));
  if (o.item_separator == "\x01") s.erase(std::remove(s.begin(), s.end(), '\x01'), s.end());
  return Value(std::move(s));
}

Result<Value> select(Renderer& r, const Value& seq, const CallArgs& a, bool by_attr, bool keep) {
  (void)r;
  if (!seq.truthy()) return Value::list();  // jinja2: `if seq:` before iterating
  TS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(seq));
  std::string attr;
  size_t next = 0;
  if (by_attr) {
    const Value* at = arg(a, 0, "attribute");
    if (at == nullptr || !at->is_string()) return bad("selectattr/rejectattr need an attribute name");
    attr = at->as_string();
    next = 1;
  }
  const Value* test = next < a.positional.size() ? &a.positional[next] : nullptr;
  CallArgs test_args = rest_args(a, next + 1);
  test_args.keyword.clear();
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attr) {
      TS_ASSIGN_OR_RETURN(subject, attr_path(item, attr));
    }
    bool pass = false;
    if (test == nullptr) {
      pass = subject.truthy();
    } else {
      if (!test->is_string()) return bad("a test name must be a string");
      TS_ASSIGN_OR_RETURN(pass, call_test(test->as_string(), subject, test_args));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Result<Value> map_filter(Renderer& r, const Value& seq, const CallArgs& a) {
  if (!seq.truthy()) return Value::list();  // jinja2: `if seq:` before iterating
  TS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(seq));
  std::vector<Value> out;
  if (const Value* at = a.kw("attribute")) {
    const Value* dflt = a.kw("default");
    for (const Value& item : items) {
      TS_ASSIGN_OR_RETURN(Value v, attr_path(item, to_str(*at)));
      out.push_back(v.is_undefined() && dflt != nullptr ? *dflt : v);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) return bad("map() needs a filter name or attribute=");
  CallArgs fargs = rest_args(a, 1);
  for (const Value& item : items) {
    TS_ASSIGN_OR_RETURN(Value v, call_filter(r, a.positional[0].as_string(), item, fargs));
    out.push_back(std::move(v));
  }
  return Value::list(std::move(out));
}

Result<Value> sort_filter(const Value& seq, const CallArgs& a, bool dictsort) {
  std::vector<Value> items;
  if (dictsort) {
    TS_ASSIGN_OR_RETURN(Value pairs, get_attr(seq, "items").value().function()({}));
    items = pairs.as_list();
  } else {
    TS_ASSIGN_OR_RETURN(items, iterate(seq));
  }
  bool reverse = false, case_sensitive = false;
  std::string attribute;
  if (const Value* v = dictsort ? a.kw("reverse") : arg(a, 0, "reverse")) reverse = v->truthy();
  if (const Value* v = dictsort ? arg(a, 0, "case_sensitive") : arg(a, 1, "case_sensitive")) {
    case_sensitive = v->truthy();
  }
  if (const Value* v = dictsort ? nullptr : arg(a, 2, "attribute")) attribute = to_str(*v);
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    Value key = item;
    if (dictsort) key = item.as_list()[0];
    else if (!attribute.empty()) {
      TS_ASSIGN_OR_RETURN(key, attr_path(item, attribute));
    }
    if (key.is_string() && !case_sensitive) key = Value(ascii_lower(key.as_string()));
    keyed.emplace_back(std::move(key), item);
  }
  std::optional<Error> failure;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    auto c = compare_values(x.first, y.first, "<");
    if (!c.ok()) {
      if (!failure) failure = c.error();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  if (failure) return *failure;
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return Value::list(std::move(out));
}

// jinja2 compares strings case-insensitively in min, max, unique and sort unless told otherwise.
Value fold_case(const Value& v, bool case_sensitive) {
  return v.is_string() && !case_sensitive ? Value(ascii_lower(v.as_string())) : v;
}

Result<Value> min_max(const Value& seq, bool want_max, const CallArgs& a) {
  const Value* cs = arg(a, 0, "case_sensitive");
  const bool case_sensitive = cs != nullptr && cs->truthy();
  TS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(seq));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  Value best = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    TS_ASSIGN_OR_RETURN(int c, compare_values(fold_case(items[i], case_sensitive), fold_case(best, case_sensitive),
                                              want_max ? ">" : "<"));
    if (want_max ? c > 0 : c < 0) best = items[i];
  }
  return best;
}

}  // namespace

Result<Value> call_filter(Renderer& r, const std::string& name, const Value& v, const CallArgs& a) {
  if (name == "trim") {
    const Value* chars = arg(a, 0, "chars");
    std::optional<std::string> cs;
    if (chars != nullptr && chars->is_string()) cs = chars->as_string();
    return Value(py_strip(to_str(v), cs, true, true));
  }
  if (name == "length" || name == "count") {
    TS_ASSIGN_OR_RETURN(int64_t n, length(v));
    return Value(n);
  }
  if (name == "upper") return Value(ascii_upper(to_str(v)));
  if (name == "lower") return Value(ascii_lower(to_str(v)));
  if (name == "capitalize") return Value(py_capitalize(to_str(v)));
  if (name == "title") return Value(jinja_title(to_str(v)));
  if (name == "string") return v.is_string() ? v : Value(to_str(v));
  if (name == "safe") return v;
  if (name == "escape" || name == "e" || name == "forceescape") return Value(html_escape(to_str(v)));
  if (name == "tojson") return tojson(v, a);
  if (name == "default" || name == "d") {
    const Value* dflt = arg(a, 0, "default_value");
    const Value* boolean = arg(a, 1, "boolean");
    bool use = v.is_undefined() || (boolean != nullptr && boolean->truthy() && !v.truthy());
    if (!use) return v;
    return dflt != nullptr ? *dflt : Value(std::string());
  }
  if (name == "replace") {
    const Value* from = arg(a, 0, "old");
    const Value* to = arg(a, 1, "new");
    const Value* count = arg(a, 2, "count");
    if (from == nullptr || to == nullptr) return bad("replace() needs old and new");
    return Value(py_replace(to_str(v), to_str(*from), to_str(*to),
                            count != nullptr && count->is_int() ? count->as_int() : -1));
  }
  if (name == "join") {
    TS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    const Value* sep = arg(a, 0, "d");
    const Value* attribute = arg(a, 1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += sep != nullptr ? to_str(*sep) : "";
      Value item = items[i];
      if (attribute != nullptr) {
        TS_ASSIGN_OR_RETURN(item, attr_path(item, to_str(*attribute)));
      }
      out += to_str(item);
      if (out.size() > r.limits().max_output_bytes) return make_error(ErrorCode::kResourceExhausted, "join too large");
    }
    return Value(std::move(out));
  }
  if (name == "first" || name == "last") {
    TS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    if (items.empty()) return Value::undefined(std::string("No ") + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    TS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    return Value::list(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list();
    if (!v.is_dict()) return bad("items filter needs a mapping, got " + type_name(v));
    return get_attr(v, "items").value().function()({});
  }
  if (name == "reverse") {
    if (v.is_string()) return slice(v, std::nullopt, std::nullopt, -1);
    TS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "unique") {
    const Value* cs = arg(a, 0, "case_sensitive");
    const bool case_sensitive = cs != nullptr && cs->truthy();
    TS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    std::vector<Value> out, keys;
    for (const Value& x : items) {
      Value key = fold_case(x, case_sensitive);
      bool seen = false;
      for (const Value& y : keys) seen = seen || equals(key, y);
      if (!seen) {
        out.push_back(x);
        keys.push_back(std::move(key));
      }
    }
    return Value::list(std::move(out));
  }
  if ((name == "int" || name == "float") && v.is_undefined()) return bad(v.undefined_hint());
  if (name == "int") return to_int(v, arg(a, 0, "default") ? *arg(a, 0, "default") : Value(int64_t{0}));
  if (name == "float") {
    if (v.is_number()) return Value(v.as_float());
    if (v.is_string()) {
      try {
        size_t used = 0;
        std::string s = py_strip(v.as_string(), std::nullopt, true, true);
        double d = std::stod(s, &used);
        if (used == s.size()) return Value(d);
      } catch (...) {
      }
    }
    const Value* dflt = arg(a, 0, "default");
    return dflt != nullptr ? *dflt : Value(0.0);
  }
  if (name == "abs") {
    if (!v.is_number()) return bad("bad operand type for abs(): '" + type_name(v) + "'");
    return v.is_float() ? Value(std::fabs(v.as_float())) : Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (name == "round") {
    if (!v.is_number()) return bad("round needs a number");
    const Value* prec = arg(a, 0, "precision");
    double p = std::pow(10.0, prec != nullptr ? static_cast<double>(prec->as_int()) : 0.0);
    return Value(std::round(v.as_float() * p) / p);
  }
  if (name == "indent") {
    const Value* width = arg(a, 0, "width");
    std::string pad = "    ";
    if (width != nullptr) {
      pad = width->is_string() ? width->as_string()
                               : std::string(static_cast<size_t>(std::clamp<int64_t>(width->as_int(), 0, 256)), ' ');
    }
    const Value* first = arg(a, 1, "first");
    const Value* blank = arg(a, 2, "blank");
    return Value(
        indent_lines(to_str(v), pad, first != nullptr && first->truthy(), blank != nullptr && blank->truthy()));
  }
  if (name == "wordcount") return Value(static_cast<int64_t>(py_split(to_str(v), std::nullopt, -1, false).size()));
  if (name == "attr") {
    const Value* n = arg(a, 0, "name");
    if (n == nullptr) return bad("attr() needs a name");
    return get_attr(v, to_str(*n));
  }
  if (name == "selectattr") return select(r, v, a, true, true);
  if (name == "rejectattr") return select(r, v, a, true, false);
  if (name == "select") return select(r, v, a, false, true);
  if (name == "reject") return select(r, v, a, false, false);
  if (name == "map") return map_filter(r, v, a);
  if (name == "sort") return sort_filter(v, a, false);
  if (name == "dictsort") {
    if (!v.is_dict()) return bad("dictsort needs a mapping");
    return sort_filter(v, a, true);
  }
  if (name == "min" || name == "max") return min_max(v, name == "max", a);
  if (name == "sum") {
    TS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    const Value* attribute = arg(a, 0, "attribute");
    Value total = arg(a, 1, "start") ? *arg(a, 1, "start") : Value(int64_t{0});
    for (Value item : items) {
      if (attribute != nullptr) {
        TS_ASSIGN_OR_RETURN(item, attr_path(item, to_str(*attribute)));
      }
      TS_ASSIGN_OR_RETURN(total, arithmetic("+", total, item, r.limits().max_output_bytes));
    }
    return total;
  }
  return bad("no filter named '" + name + "'");
}

Result<bool> call_test(const std::string& name, const Value& v, const CallArgs& a) {
  const Value* other = arg(a, 0, "other");
  auto need_other = [&]() -> Result<const Value*> {
    if (other == nullptr) return bad("test '" + name + "' needs an argument");
    return other;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.is_namespace();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "lower") return py_is(to_str(v), "islower");
  if (name == "upper") return py_is(to_str(v), "isupper");
  if (name == "odd" || name == "even") {
    if (!v.is_number()) return bad("test '" + name + "' needs a number, got " + type_name(v));
    TS_ASSIGN_OR_RETURN(Value m, arithmetic("%", v, Value(int64_t{2}), 0));
    return equals(m, Value(int64_t{name == "odd" ? 1 : 0}));
  }
  if (name == "divisibleby") {
    TS_ASSIGN_OR_RETURN(const Value* n, need_other());
    if (!v.is_number() || !n->is_number() || n->as_int() == 0) return bad("divisibleby needs non-zero integers");
    return v.as_int() % n->as_int() == 0;
  }
  if (name == "sameas") {
    TS_ASSIGN_OR_RETURN(const Value* o, need_other());
    return v.same_object(*o) && v.kind() == o->kind();
  }
  if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=") {
    TS_ASSIGN_OR_RETURN(const Value* o, need_other());
    return equals(v, *o) == (name != "ne" && name != "!=");
  }
  if (name == "lt" || name == "lessthan" || name == "<" || name == "le" || name == "<=" || name == "gt" ||
      name == "greaterthan" || name == ">" || name == "ge" || name == ">=") {
    TS_ASSIGN_OR_RETURN(const Value* o, need_other());
    TS_ASSIGN_OR_RETURN(int c, compare_values(v, *o, name.c_str()));
    if (name == "lt" || name == "lessthan" || name == "<") return c < 0;
    if (name == "le" || name == "<=") return c <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return c > 0;
    return c >= 0;
  }
  if (name == "in") {
    TS_ASSIGN_OR_RETURN(const Value* o, need_other());
    return contains(*o, v);
  }
  return bad("no test named '" + name + "'");
}

}  // namespace tessera::jinja::internal
