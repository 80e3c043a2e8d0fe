// JSON Schema -> compiled grammar (grammar.h lists the subset).
#include <algorithm>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "schema.h"
#include "tessera/common/json_depth.h"
#include "tessera/grammar/grammar.h"

namespace tessera::grammar {
namespace {

using json = nlohmann::ordered_json;

const char* const kKnownKeywords[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength",
    "maxLength", "enum", "const", "anyOf", "oneOf", "$ref", "$defs", "definitions", "title", "description",
    "default", "examples", "$schema", "$id", "$comment", "strict"};

std::bitset<256> digits_and_minus() {
  std::bitset<256> b;
  for (char c = '0'; c <= '9'; ++c) b.set(static_cast<uint8_t>(c));
  b.set('-');
  return b;
}

// Where a schema sits, as a chain of parts up to the root (or to a $defs entry): built into the
// "/properties/a/anyOf/0" string only for an error message, so compiling costs no path strings.
// `depth` counts schemas from the root along the compile (a $ref target one deeper than its $ref).
struct Path {
  const Path* up = nullptr;
  std::string_view part;        // "properties", "items", "anyOf", "$defs", ...
  std::string_view name;        // a property or $defs name; empty for none
  int64_t index = -1;           // an anyOf/oneOf option; -1 for none
  int32_t depth = 1;

  std::string str() const {
    std::string s = up != nullptr ? up->str() : std::string();
    if (part.empty()) return s;
    (s += "/") += part;
    if (!name.empty()) (s += "/") += name;
    if (index >= 0) (s += "/") += std::to_string(index);
    return s;
  }
  std::string where() const {
    std::string s = str();
    return s.empty() ? "/" : s;
  }
};

class Compiler {
 public:
  Compiler(Schema& s, const json& doc) : s_(s), doc_(doc) {}

  Node* make(Kind k) {
    s_.nodes.push_back(std::make_unique<Node>());
    s_.nodes.back()->kind = k;
    return s_.nodes.back().get();
  }

  Node* literals(std::vector<std::string> lits) {
    std::sort(lits.begin(), lits.end());
    lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
    Node* n = make(Kind::kLiterals);
    n->literals = std::move(lits);
    return n;
  }

  void make_any_targets() {
    Node* any = make(Kind::kAny);
    s_.any_object = make(Kind::kFreeObject);
    Node* arr = make(Kind::kArray);
    arr->items = any;
    s_.any_array = arr;
    s_.any_string = make(Kind::kString);
    s_.any_literals = literals({"true", "false", "null"});
    s_.any_number = make(Kind::kNumber);
  }

  Result<Node*> compile(const json& j, const Path& where) {
    if (where.depth > kMaxDepth) {
      return fail(ErrorCode::kUnsupported, where,
                  "the schema nests deeper than " + std::to_string(kMaxDepth) +
                      " levels (each property, items, anyOf/oneOf option and $ref target is one level); constrained "
                      "decoding supports a nesting depth of at most " + std::to_string(kMaxDepth));
    }
    if (j.is_boolean()) {
      if (j.get<bool>()) return make(Kind::kAny);
      return fail(ErrorCode::kInvalidArgument, where, "the schema 'false' accepts nothing, so nothing can be generated");
    }
    if (!j.is_object()) return fail(ErrorCode::kInvalidArgument, where, "a schema must be a JSON object or a boolean");
    for (const auto& [k, v] : j.items()) {
      if (std::find(std::begin(kKnownKeywords), std::end(kKnownKeywords), k) == std::end(kKnownKeywords)) {
        return fail(ErrorCode::kUnsupported, where, "keyword '" + k + "' is not supported by constrained decoding");
      }
    }
    if (const auto it = j.find("$ref"); it != j.end()) return ref(*it, where);
    if (const auto it = j.find("const"); it != j.end()) return literals({it->dump()});
    if (const auto it = j.find("enum"); it != j.end()) {
      if (!it->is_array() || it->empty()) return fail(ErrorCode::kInvalidArgument, where, "'enum' must be a non-empty array");
      if (it->size() > static_cast<size_t>(kMaxLiterals)) {
        return fail(ErrorCode::kUnsupported, where, "'enum' has " + std::to_string(it->size()) + " values; at most " +
                                                        std::to_string(kMaxLiterals) + " are supported");
      }
      std::vector<std::string> lits;
      for (const json& v : *it) lits.push_back(v.dump());
      return literals(std::move(lits));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      const auto it = j.find(key);
      if (it == j.end()) continue;
      if (!it->is_array() || it->empty()) {
        return fail(ErrorCode::kInvalidArgument, where, std::string("'") + key + "' must be a non-empty array of schemas");
      }
      Node* u = make(Kind::kUnion);
      for (size_t i = 0; i < it->size(); ++i) {
        TS_ASSIGN_OR_RETURN(Node* opt, compile((*it)[i], Path{.up = &where, .part = key, .index = static_cast<int64_t>(i),
                                                             .depth = where.depth + 1}));
        u->options.push_back(opt);
      }
      return u;
    }
    const auto t = j.find("type");
    if (t == j.end()) {
      if (j.contains("properties")) return typed(j, "object", where);
      if (j.contains("items")) return typed(j, "array", where);
      return make(Kind::kAny);
    }
    if (t->is_string()) return typed(j, t->get<std::string>(), where);
    if (!t->is_array() || t->empty()) return fail(ErrorCode::kInvalidArgument, where, "'type' must be a string or a non-empty array of strings");
    std::vector<std::string> types;
    for (const json& x : *t) {
      if (!x.is_string()) return fail(ErrorCode::kInvalidArgument, where, "'type' must be a string or a non-empty array of strings");
      types.push_back(x.get<std::string>());
    }
    // integer is a subset of number: a list naming both generates numbers.
    if (std::find(types.begin(), types.end(), "number") != types.end()) std::erase(types, std::string("integer"));
    if (types.size() == 1) return typed(j, types[0], where);
    Node* u = make(Kind::kUnion);
    for (const std::string& ty : types) {
      TS_ASSIGN_OR_RETURN(Node* opt, typed(j, ty, where));
      u->options.push_back(opt);
    }
    return u;
  }

 private:
  Result<Node*> fail(ErrorCode code, const Path& where, const std::string& what) {
    return make_error(code, where.where() + ": " + what);
  }

  Result<int32_t> count(const json& j, const char* key, int32_t dflt, const Path& where) {
    const auto it = j.find(key);
    if (it == j.end()) return dflt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1000000) {
      return make_error(ErrorCode::kInvalidArgument, where.where() + ": '" + key + "' must be an integer in [0, 1000000]");
    }
    return static_cast<int32_t>(it->get<int64_t>());
  }

  Result<Node*> ref(const json& r, const Path& where) {
    if (!r.is_string()) return fail(ErrorCode::kInvalidArgument, where, "'$ref' must be a string");
    const std::string target = r.get<std::string>();
    if (const auto it = refs_.find(target); it != refs_.end()) return it->second;
    std::string section;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (target.rfind(prefix, 0) == 0) section = prefix;
    }
    const std::string name = section.empty() ? "" : target.substr(section.size());
    const std::string key = section == "#/$defs/" ? "$defs" : "definitions";
    if (section.empty() || name.empty() || name.find('/') != std::string::npos || !doc_.contains(key) ||
        !doc_[key].is_object() || !doc_[key].contains(name)) {
      return fail(ErrorCode::kUnsupported, where,
                  "'$ref' " + target + " does not name an entry of the root's $defs or definitions");
    }
    // A placeholder first, so that a recursive reference resolves to it.
    Node* placeholder = make(Kind::kUnion);
    refs_[target] = placeholder;
    TS_ASSIGN_OR_RETURN(Node* body, compile(doc_[key][name], Path{.part = key, .name = name, .depth = where.depth + 1}));
    *placeholder = *body;
    return placeholder;
  }

  Result<Node*> typed(const json& j, const std::string& type, const Path& where) {
    if (type == "string") {
      Node* n = make(Kind::kString);
      TS_ASSIGN_OR_RETURN(n->min_len, count(j, "minLength", 0, where));
      TS_ASSIGN_OR_RETURN(n->max_len, count(j, "maxLength", -1, where));
      if (n->max_len >= 0 && n->max_len < n->min_len) return fail(ErrorCode::kInvalidArgument, where, "maxLength < minLength");
      return n;
    }
    if (type == "number") return make(Kind::kNumber);
    if (type == "integer") return make(Kind::kInteger);
    if (type == "boolean") return literals({"true", "false"});
    if (type == "null") return literals({"null"});
    if (type == "array") {
      Node* n = make(Kind::kArray);
      TS_ASSIGN_OR_RETURN(n->min_items, count(j, "minItems", 0, where));
      TS_ASSIGN_OR_RETURN(n->max_items, count(j, "maxItems", -1, where));
      if (n->max_items >= 0 && n->max_items < n->min_items) return fail(ErrorCode::kInvalidArgument, where, "maxItems < minItems");
      if (const auto it = j.find("items"); it != j.end()) {
        TS_ASSIGN_OR_RETURN(n->items, compile(*it, Path{.up = &where, .part = "items", .depth = where.depth + 1}));
      } else {
        n->items = make(Kind::kAny);
      }
      return n;
    }
    if (type == "object") {
      const auto props = j.find("properties");
      if (props == j.end() || (props->is_object() && props->empty())) return make(Kind::kFreeObject);
      if (!props->is_object()) return fail(ErrorCode::kInvalidArgument, where, "'properties' must be an object");
      if (props->size() > static_cast<size_t>(kMaxProperties)) {
        return fail(ErrorCode::kUnsupported, where, "an object with " + std::to_string(props->size()) +
                                                        " properties; at most " + std::to_string(kMaxProperties) + " are supported");
      }
      Node* n = make(Kind::kObject);
      for (const auto& [name, sub] : props->items()) {
        Property p;
        p.key = json(name).dump();
        TS_ASSIGN_OR_RETURN(Node* v, compile(sub, Path{.up = &where, .part = "properties", .name = name, .depth = where.depth + 1}));
        p.value = v;
        n->props.push_back(std::move(p));
      }
      if (const auto req = j.find("required"); req != j.end()) {
        if (!req->is_array()) return fail(ErrorCode::kInvalidArgument, where, "'required' must be an array of property names");
        for (const json& r : *req) {
          if (!r.is_string()) return fail(ErrorCode::kInvalidArgument, where, "'required' must be an array of property names");
          const std::string key = json(r.get<std::string>()).dump();
          auto it = std::find_if(n->props.begin(), n->props.end(), [&](const Property& p) { return p.key == key; });
          if (it == n->props.end()) {
            return fail(ErrorCode::kInvalidArgument, where, "'required' names '" + r.get<std::string>() + "', which is not in 'properties'");
          }
          it->required = true;
        }
      }
      return n;
    }
    return fail(ErrorCode::kInvalidArgument, where, "unknown type '" + type + "'");
  }

  Schema& s_;
  const json& doc_;
  std::map<std::string, Node*> refs_;
};

int32_t sat_add(int64_t a, int64_t b) { return static_cast<int32_t>(std::min<int64_t>(a + b, kInfinite)); }

// Shortest serializations and first bytes, to a fixed point (references may be cyclic). A node
// is made before its children, so visiting the newest first settles a tree in one pass (and a
// cycle in a few): the pass count does not grow with the depth.
void finalize_lengths(Schema& s) {
  static const std::bitset<256> kNumberFirst = digits_and_minus();
  for (bool changed = true; changed;) {
    changed = false;
    for (auto up = s.nodes.rbegin(); up != s.nodes.rend(); ++up) {
      Node& n = **up;
      int64_t len = kInfinite;
      std::bitset<256> first;
      switch (n.kind) {
        case Kind::kAny:
          len = 1;
          first = kNumberFirst;
          for (char c : std::string("{[\"tfn")) first.set(static_cast<uint8_t>(c));
          break;
        case Kind::kFreeObject: len = 2; first.set('{'); break;
        case Kind::kString: len = 2 + n.min_len; first.set('"'); break;
        case Kind::kNumber:
        case Kind::kInteger: len = 1; first = kNumberFirst; break;
        case Kind::kLiterals:
          for (const std::string& l : n.literals) {
            len = std::min<int64_t>(len, static_cast<int64_t>(l.size()));
            first.set(static_cast<uint8_t>(l[0]));
          }
          break;
        case Kind::kArray:
          first.set('[');
          len = n.min_items == 0 ? 2 : sat_add(2 + int64_t{n.min_items} - 1, int64_t{n.min_items} * n.items->min_chars);
          break;
        case Kind::kObject: {
          first.set('{');
          int64_t sum = 2, required = 0;
          for (const Property& p : n.props) {
            if (!p.required) continue;
            sum = sat_add(sum, static_cast<int64_t>(p.key.size()) + 1 + p.value->min_chars);
            ++required;
          }
          len = sat_add(sum, std::max<int64_t>(0, required - 1));
          break;
        }
        case Kind::kUnion:
          for (const Node* o : n.options) {
            len = std::min<int64_t>(len, o->min_chars);
            first |= o->first;
          }
          break;
      }
      len = std::min<int64_t>(len, kInfinite);
      if (len != n.min_chars || first != n.first) {
        n.min_chars = static_cast<int32_t>(len);
        n.first = first;
        changed = true;
      }
    }
  }
}

Status finalize_unions(Schema& s) {
  for (auto& up : s.nodes) {
    Node& n = *up;
    if (n.kind != Kind::kUnion) continue;
    std::fill(std::begin(n.option_by_byte), std::end(n.option_by_byte), int8_t{0});
    for (size_t i = 0; i < n.options.size(); ++i) {
      for (int b = 0; b < 256; ++b) {
        if (!n.options[i]->first.test(static_cast<size_t>(b))) continue;
        if (n.option_by_byte[b] != 0) {
          return make_error(ErrorCode::kUnsupported,
                            "anyOf/oneOf/type list: options " + std::to_string(n.option_by_byte[b] - 1) + " and " +
                                std::to_string(i) + " can both start with '" + std::string(1, static_cast<char>(b)) +
                                "'; constrained decoding needs the first character to tell the options apart");
        }
        n.option_by_byte[b] = static_cast<int8_t>(i + 1);
      }
    }
  }
  return ok_status();
}

}  // namespace

Result<std::shared_ptr<const Schema>> compile_json_schema(std::string_view schema_json) {
  // Before parsing: nlohmann's dump() (of a const or enum value) recurses once per level.
  if (json_nesting_depth(schema_json, kMaxJsonDepth) > kMaxJsonDepth) {
    return make_error(ErrorCode::kUnsupported, "the JSON schema nests more than " + std::to_string(kMaxJsonDepth) +
                                                   " JSON arrays/objects inside each other; at most " +
                                                   std::to_string(kMaxJsonDepth) + " are supported");
  }
  json doc = json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return make_error(ErrorCode::kInvalidArgument, "the JSON schema is not valid JSON");
  auto s = std::make_shared<Schema>();
  Compiler c(*s, doc);
  c.make_any_targets();
  TS_ASSIGN_OR_RETURN(Node* root, c.compile(doc, Path{}));
  s->root = root;
  finalize_lengths(*s);
  if (s->root->min_chars >= kInfinite) {
    return make_error(ErrorCode::kInvalidArgument, "the JSON schema has no finite instance (a required property recurses forever)");
  }
  TS_TRY(finalize_unions(*s));
  return std::shared_ptr<const Schema>(std::move(s));
}

std::shared_ptr<const Schema> any_json_object() {
  static const std::shared_ptr<const Schema> s = [] {
    auto r = compile_json_schema(kJsonObjectSchema);
    TS_CHECK(r.ok());
    return std::move(r).value();
  }();
  return s;
}

}  // namespace tessera::grammar
