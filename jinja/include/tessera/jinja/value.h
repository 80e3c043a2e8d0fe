// Value: the dynamic value a Jinja template computes with, modelled on the Python objects that
// Hugging Face chat templates see (they are rendered by Python's jinja2 over JSON data).
//
// Kinds: undefined (a missing variable, key or attribute), none, bool, int (int64), float
// (double), string (UTF-8 bytes; lengths and slices count code points as Python does), list
// (also tuples), dict (string keys, insertion order kept like a Python dict), callable
// (built-in functions, macros, bound methods).
//
// Ownership: lists, dicts and callables are shared by reference, like Python objects: copying a
// Value copies the handle, so a namespace() changed through one copy is seen through all. Values
// are not thread-safe to mutate; a rendered template never mutates the caller's values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/common/result.h"

namespace tessera::jinja {

class Value;
class Dict;
struct CallArgs;

// A callable returns a Value or an Error (raise_exception, a type error).
using Function = std::function<Result<Value>(const CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined
  static Value none();
  Value(bool b);                  // NOLINT(implicit)
  Value(int64_t i);               // NOLINT(implicit)
  Value(int i) : Value(static_cast<int64_t>(i)) {}  // NOLINT(implicit)
  Value(double d);                // NOLINT(implicit)
  Value(std::string s);           // NOLINT(implicit)
  Value(const char* s) : Value(std::string(s)) {}  // NOLINT(implicit)
  static Value list(std::vector<Value> items = {}, bool tuple = false);
  static Value dict();
  static Value dict(Dict d);
  static Value namespace_object(Dict d);  // a dict whose attributes `set ns.x = ...` may assign
  static Value callable(std::string name, Function fn);
  // An undefined value that remembers why ("'x' is undefined", "'dict object' has no attribute
  // 'y'"), for the error raised when it is used.
  static Value undefined(std::string hint);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kDict && namespace_; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? d_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *s_; }
  const std::vector<Value>& as_list() const { return *list_; }
  std::vector<Value>& mutable_list() { return *list_; }
  const Dict& as_dict() const { return *dict_; }
  Dict& mutable_dict() { return *dict_; }
  const std::string& callable_name() const { return *s_; }
  const Function& function() const { return *fn_; }
  const std::string& undefined_hint() const;

  bool truthy() const;  // Python truthiness; undefined is false
  bool same_object(const Value& other) const;  // Python `is` for containers, == for scalars

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  bool namespace_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<std::string> s_;  // string, callable name, or undefined hint
  std::shared_ptr<std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

// Insertion-ordered string-keyed map (a Python dict). Lookups are linear: template dicts are
// small (a message, a tool schema).
class Dict {
 public:
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(std::string key, Value value);  // replaces in place, or appends
  size_t size() const { return items_.size(); }
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* kw(std::string_view name) const;  // nullptr when not given
};

// Python equality (1 == 1.0 == True; lists and dicts compare by content; undefined equals only
// undefined).
bool equals(const Value& a, const Value& b);

// Python str(): None -> "None", True -> "True", 1.0 -> "1.0", lists and dicts as repr(),
// undefined -> "".
std::string to_str(const Value& v);
// Python repr(): strings quoted ('a', "it's").
std::string to_repr(const Value& v);
// Python float repr: shortest round-trip digits ("0.1", "1e-05", "1e+16", "inf").
std::string format_float(double d);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' `tojson` filter
// calls it. indent < 0 means None. Undefined and callables are errors (not JSON serializable).
struct JsonOptions {
  int indent = -1;
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator;  // empty: ", " without indent, "," with
  std::string key_separator = ": ";
};
Result<std::string> to_json(const Value& v, const JsonOptions& options = {});

// JSON -> Value (objects keep their key order when given an ordered_json).
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

// UTF-8 helpers shared by the filters and string methods (Python semantics over code points).
std::vector<uint32_t> utf8_decode(std::string_view s);  // invalid bytes decode as U+FFFD
std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin = 0, size_t end = SIZE_MAX);
bool is_py_space(uint32_t cp);  // Python str.isspace()

}  // namespace tessera::jinja
