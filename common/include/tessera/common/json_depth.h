// The nesting depth of a JSON text, measured before parsing it: nlohmann::json parses any depth
// without recursion, but dump() and code walking the value recurse once per level, so a text
// nested a few hundred thousand levels deep (a 1 MiB body) would overflow a thread's stack.
// Header-only; pure function, thread-safe.
#pragma once

#include <string_view>

namespace tessera {

// The deepest nesting of '[' and '{' in `text`, counting only those outside strings; stops at
// limit + 1 (the text is then too deep, whatever its real depth). Malformed text gets some count
// (the parser reports what is wrong with it).
inline int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > limit) return deepest;
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace tessera
