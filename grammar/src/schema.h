// The compiled grammar (internal to tessera_grammar): a graph of nodes, one per schema (a
// $ref cycle makes it cyclic). Immutable after compile_json_schema returns.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera::grammar {

struct Node;

enum class Kind : uint8_t {
  kAny,         // any JSON value: the first byte picks one of the any_* nodes below
  kObject,      // declared properties, in order
  kFreeObject,  // any keys, any values
  kArray,
  kString,
  kNumber,
  kInteger,
  kLiterals,    // one of a few exact JSON texts (enum, const, true/false/null)
  kUnion,       // anyOf / oneOf / a list of types: the first byte picks the option
};

inline constexpr int32_t kMaxProperties = 64;
inline constexpr int32_t kMaxLiterals = 64;
inline constexpr int32_t kMaxDepth = 64;        // schema nesting at compile; value nesting in the Matcher
inline constexpr int32_t kMaxJsonDepth = 4 * kMaxDepth;  // arrays/objects in the schema's JSON text
inline constexpr int32_t kMaxNumberChars = 24;
inline constexpr int32_t kMaxExponentDigits = 2;  // so every generated number is a finite double
inline constexpr int32_t kInfinite = 1 << 28;

struct Property {
  std::string key;  // the key as generated, quotes included: "\"name\""
  const Node* value = nullptr;
  bool required = false;
};

struct Node {
  Kind kind = Kind::kAny;
  std::vector<Property> props;             // kObject
  const Node* items = nullptr;             // kArray
  int32_t min_items = 0, max_items = -1;   // kArray (-1: unbounded)
  int32_t min_len = 0, max_len = -1;       // kString, in characters (-1: unbounded)
  std::vector<std::string> literals;       // kLiterals: sorted, distinct, non-empty
  std::vector<const Node*> options;        // kUnion
  int8_t option_by_byte[256] = {};         // kUnion: first byte -> option index + 1 (0: none)
  std::bitset<256> first;                  // bytes a serialization can start with
  int32_t min_chars = kInfinite;           // length of the shortest serialization
};

struct Schema {
  std::vector<std::unique_ptr<Node>> nodes;
  const Node* root = nullptr;
  // Targets of kAny, chosen by the first byte.
  const Node* any_object = nullptr;
  const Node* any_array = nullptr;
  const Node* any_string = nullptr;
  const Node* any_literals = nullptr;  // true, false, null
  const Node* any_number = nullptr;
};

}  // namespace tessera::grammar
