// Matcher: a byte-level pushdown recognizer over the compiled schema (grammar.h).
//
// One frame per open value. Stages per kind:
//   string   0 expect '"' | 1 in string | 2 after '\' | 3 UTF-8 continuation (aux left) | 4 \u hex (aux left;
//            pos = 1 after a first digit 'd', to refuse surrogate halves)
//   number   aux: 0 start, 1 after '-', 2 after leading 0, 3 int digits, 4 after '.', 5 fraction,
//            6 after e, 7 after exponent sign, 8 exponent digits (can end in 2, 3, 5, 8); pos = length,
//            count = exponent digits
//   literals mask = candidates still matching, pos = bytes matched
//   array    0 expect '[' | 1 after '[' | 2 item open | 3 after item | 4 after ','; count = items done
//   object   0 expect '{' | 1 first key or '}' | 2 in key (mask, pos) | 3 expect ':' | 4 value open |
//            5 after value | 6 key after ','; count = index of the next property
//   free obj 0 expect '{' | 1 first key or '}' | 2 key open | 3 expect ':' | 4 value open | 5 after value | 6 after ','
#include <algorithm>
#include <climits>

#include "schema.h"
#include "tessera/grammar/grammar.h"

namespace tessera::grammar {
namespace {

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
int32_t sat(int64_t v) { return static_cast<int32_t>(std::min<int64_t>(v, kInfinite)); }

uint64_t all_bits(size_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

// Object stage 1/6 candidates: properties i.. up to and including the first required one.
uint64_t key_candidates(const Node& n, int32_t i) {
  uint64_t m = 0;
  for (size_t j = static_cast<size_t>(i); j < n.props.size(); ++j) {
    m |= uint64_t{1} << j;
    if (n.props[j].required) break;
  }
  return m;
}

// Bytes to close an object whose next property index is i; `first`: no comma needed before the
// next property (right after '{' or after a ',').
int64_t object_tail(const Node& n, size_t i, bool first) {
  int64_t sum = 1, required = 0;
  for (size_t j = i; j < n.props.size(); ++j) {
    if (!n.props[j].required) continue;
    sum += static_cast<int64_t>(n.props[j].key.size()) + 1 + n.props[j].value->min_chars;
    ++required;
  }
  if (required > 0) sum += required - (first ? 1 : 0);
  return sum;
}

bool number_can_end(uint8_t s) { return s == 2 || s == 3 || s == 5 || s == 8; }

}  // namespace

Matcher::Matcher(std::shared_ptr<const Schema> schema) : schema_(std::move(schema)) {
  stack_.push_back({.node = schema_->root});
}

bool Matcher::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (!feed(static_cast<uint8_t>(c))) return false;
  }
  return !dead_;
}

bool Matcher::feed(uint8_t c) {
  if (dead_) return false;
  for (;;) {
    if (stack_.empty()) {
      dead_ = true;
      return false;
    }
    switch (step(stack_.back(), c)) {
      case Step::kConsumed:
        return true;
      case Step::kDone:
        stack_.pop_back();
        child_done();
        return true;
      case Step::kPopRetry:
        stack_.pop_back();
        child_done();
        continue;
      case Step::kRetry:
        if (stack_.size() > static_cast<size_t>(kMaxDepth)) {
          dead_ = true;
          return false;
        }
        continue;
      case Step::kReject:
        dead_ = true;
        return false;
    }
  }
}

void Matcher::child_done() {
  if (stack_.empty()) return;
  Frame& p = stack_.back();
  switch (p.node->kind) {
    case Kind::kArray: ++p.count; p.stage = 3; break;
    case Kind::kObject: ++p.count; p.stage = 5; break;
    case Kind::kFreeObject: p.stage = p.stage == 2 ? 3 : 5; break;
    default: TS_CHECK(false) << "a frame of kind " << static_cast<int>(p.node->kind) << " has no children";
  }
}

Matcher::Step Matcher::step(Frame& f, uint8_t c) {
  const Node& n = *f.node;
  const Schema& s = *schema_;
  switch (n.kind) {
    case Kind::kAny: {
      const Node* target = c == '{' ? s.any_object : c == '[' ? s.any_array : c == '"' ? s.any_string
                         : (c == 't' || c == 'f' || c == 'n') ? s.any_literals
                         : (c == '-' || is_digit(c)) ? s.any_number : nullptr;
      if (target == nullptr) return Step::kReject;
      f = Frame{.node = target};
      return Step::kRetry;
    }
    case Kind::kUnion: {
      const int8_t opt = n.option_by_byte[c];
      if (opt == 0) return Step::kReject;
      f = Frame{.node = n.options[static_cast<size_t>(opt - 1)]};
      return Step::kRetry;
    }
    case Kind::kLiterals: {
      if (f.pos == 0 && f.mask == 0) f.mask = all_bits(n.literals.size());
      uint64_t next = 0;
      bool can_end = false;
      for (size_t i = 0; i < n.literals.size(); ++i) {
        if (!(f.mask >> i & 1)) continue;
        const std::string& l = n.literals[i];
        if (l.size() == static_cast<size_t>(f.pos)) can_end = true;
        else if (static_cast<uint8_t>(l[static_cast<size_t>(f.pos)]) == c) next |= uint64_t{1} << i;
      }
      if (next == 0) return can_end ? Step::kPopRetry : Step::kReject;
      f.mask = next;
      ++f.pos;
      for (size_t i = 0; i < n.literals.size(); ++i) {
        if ((next >> i & 1) && n.literals[i].size() > static_cast<size_t>(f.pos)) return Step::kConsumed;
      }
      return Step::kDone;
    }
    case Kind::kNumber:
    case Kind::kInteger: {
      const bool real = n.kind == Kind::kNumber;
      uint8_t to = 255;
      switch (f.aux) {
        case 0: to = c == '-' ? 1 : c == '0' ? 2 : is_digit(c) ? 3 : 255; break;
        case 1: to = c == '0' ? 2 : is_digit(c) ? 3 : 255; break;
        case 2: to = real && c == '.' ? 4 : real && (c == 'e' || c == 'E') ? 6 : 255; break;
        case 3: to = is_digit(c) ? 3 : real && c == '.' ? 4 : real && (c == 'e' || c == 'E') ? 6 : 255; break;
        case 4: to = is_digit(c) ? 5 : 255; break;
        case 5: to = is_digit(c) ? 5 : (c == 'e' || c == 'E') ? 6 : 255; break;
        case 6: to = (c == '+' || c == '-') ? 7 : is_digit(c) ? 8 : 255; break;
        case 7: to = is_digit(c) ? 8 : 255; break;
        case 8: to = is_digit(c) && f.count < kMaxExponentDigits ? 8 : 255; break;
        default: break;
      }
      // The length cap never strands the number: its last allowed character must end it.
      if (to != 255 && (f.pos + 1 > kMaxNumberChars || (f.pos + 1 == kMaxNumberChars && !number_can_end(to)))) to = 255;
      if (to == 255) return number_can_end(f.aux) ? Step::kPopRetry : Step::kReject;
      f.count = to == 8 ? f.count + 1 : 0;  // exponent digits
      f.aux = to;
      ++f.pos;
      return Step::kConsumed;
    }
    case Kind::kString:
      switch (f.stage) {
        case 0: if (c != '"') return Step::kReject; f.stage = 1; return Step::kConsumed;
        case 1:
          if (c == '"') return f.count >= n.min_len ? Step::kDone : Step::kReject;
          if (n.max_len >= 0 && f.count >= n.max_len) return Step::kReject;
          if (c == '\\') { f.stage = 2; return Step::kConsumed; }
          if (c < 0x20) return Step::kReject;
          if (c < 0x80) { ++f.count; return Step::kConsumed; }
          if (c >= 0xC2 && c <= 0xDF) f.aux = 1;
          else if (c >= 0xE0 && c <= 0xEF) f.aux = 2;
          else if (c >= 0xF0 && c <= 0xF4) f.aux = 3;
          else return Step::kReject;
          ++f.count;
          f.stage = 3;
          return Step::kConsumed;
        case 2:
          if (c == 'u') { f.stage = 4; f.aux = 4; return Step::kConsumed; }
          if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return Step::kReject;
          ++f.count;
          f.stage = 1;
          return Step::kConsumed;
        case 3:
          if (c < 0x80 || c > 0xBF) return Step::kReject;
          if (--f.aux == 0) f.stage = 1;
          return Step::kConsumed;
        default:  // 4
          if (!is_hex(c)) return Step::kReject;
          // No surrogate halves (\uD800-\uDFFF): a lone one is not valid Unicode text.
          if (f.aux == 4) f.pos = (c == 'd' || c == 'D') ? 1 : 0;
          if (f.aux == 3 && f.pos == 1 && !(c >= '0' && c <= '7')) return Step::kReject;
          if (--f.aux == 0) { ++f.count; f.stage = 1; }
          return Step::kConsumed;
      }
    case Kind::kArray:
      switch (f.stage) {
        case 0: if (c != '[') return Step::kReject; f.stage = 1; return Step::kConsumed;
        case 1:
          if (c == ']' && n.min_items == 0) return Step::kDone;
          if (n.max_items == 0) return Step::kReject;
          [[fallthrough]];
        case 4:
          f.stage = 2;
          stack_.push_back({.node = n.items});  // invalidates f
          return Step::kRetry;
        case 3:
          if (c == ',' && (n.max_items < 0 || f.count < n.max_items)) { f.stage = 4; return Step::kConsumed; }
          if (c == ']' && f.count >= n.min_items) return Step::kDone;
          return Step::kReject;
        default: return Step::kReject;
      }
    case Kind::kObject:
      switch (f.stage) {
        case 0: if (c != '{') return Step::kReject; f.stage = 1; return Step::kConsumed;
        case 1:
        case 6:
          if (c == '}' && f.stage == 1 && object_tail(n, static_cast<size_t>(f.count), true) == 1) return Step::kDone;
          f.mask = key_candidates(n, f.count);
          f.pos = 0;
          f.stage = 2;
          [[fallthrough]];
        case 2: {
          uint64_t next = 0;
          for (size_t j = 0; j < n.props.size(); ++j) {
            if ((f.mask >> j & 1) && n.props[j].key.size() > static_cast<size_t>(f.pos) &&
                static_cast<uint8_t>(n.props[j].key[static_cast<size_t>(f.pos)]) == c)
              next |= uint64_t{1} << j;
          }
          if (next == 0) return Step::kReject;
          f.mask = next;
          ++f.pos;
          for (size_t j = 0; j < n.props.size(); ++j) {
            if ((next >> j & 1) && n.props[j].key.size() == static_cast<size_t>(f.pos)) {
              f.count = static_cast<int32_t>(j);  // keys end with '"' and are distinct: j is unique
              f.stage = 3;
            }
          }
          return Step::kConsumed;
        }
        case 3: {
          if (c != ':') return Step::kReject;
          f.stage = 4;
          const Node* v = n.props[static_cast<size_t>(f.count)].value;
          stack_.push_back({.node = v});
          return Step::kConsumed;
        }
        case 5:
          if (c == ',' && static_cast<size_t>(f.count) < n.props.size()) { f.stage = 6; return Step::kConsumed; }
          if (c == '}' && object_tail(n, static_cast<size_t>(f.count), false) == 1) return Step::kDone;
          return Step::kReject;
        default: return Step::kReject;
      }
    case Kind::kFreeObject:
      switch (f.stage) {
        case 0: if (c != '{') return Step::kReject; f.stage = 1; return Step::kConsumed;
        case 1:
          if (c == '}') return Step::kDone;
          [[fallthrough]];
        case 6:
          f.stage = 2;
          stack_.push_back({.node = s.any_string});
          return Step::kRetry;
        case 3:
          if (c != ':') return Step::kReject;
          f.stage = 4;
          stack_.push_back({.node = s.any_array->items});  // any value
          return Step::kConsumed;
        case 5:
          if (c == ',') { f.stage = 6; return Step::kConsumed; }
          if (c == '}') return Step::kDone;
          return Step::kReject;
        default: return Step::kReject;
      }
  }
  return Step::kReject;
}

bool Matcher::complete() const {
  if (dead_) return false;
  if (stack_.empty()) return true;
  if (stack_.size() != 1) return false;
  const Frame& f = stack_.back();
  if (f.node->kind == Kind::kNumber || f.node->kind == Kind::kInteger) return number_can_end(f.aux);
  if (f.node->kind == Kind::kLiterals && f.pos > 0) {
    for (size_t i = 0; i < f.node->literals.size(); ++i) {
      if ((f.mask >> i & 1) && f.node->literals[i].size() == static_cast<size_t>(f.pos)) return true;
    }
  }
  return false;
}

// Bytes to finish frame f. For a frame below the top, its open child is assumed finished (the
// child's own share is counted by the child's frame).
int32_t Matcher::frame_remaining(const Frame& f) const {
  const Node& n = *f.node;
  switch (n.kind) {
    case Kind::kAny:
    case Kind::kUnion:
      return n.min_chars;
    case Kind::kLiterals: {
      if (f.pos == 0) return n.min_chars;
      int64_t best = kInfinite;
      for (size_t i = 0; i < n.literals.size(); ++i) {
        if (f.mask >> i & 1) best = std::min<int64_t>(best, static_cast<int64_t>(n.literals[i].size()) - f.pos);
      }
      return sat(best);
    }
    case Kind::kNumber:
    case Kind::kInteger:
      return number_can_end(f.aux) ? 0 : 1;
    case Kind::kString: {
      const int32_t short_by = std::max(0, n.min_len - f.count);
      switch (f.stage) {
        case 0: return 2 + n.min_len;
        case 1: return 1 + short_by;
        case 2: return 1 + 1 + std::max(0, n.min_len - f.count - 1);
        case 3: return f.aux + 1 + short_by;
        default: return f.aux + 1 + std::max(0, n.min_len - f.count - 1);
      }
    }
    case Kind::kArray: {
      const int64_t item = n.items->min_chars;
      auto tail = [&](int64_t done) { return std::max<int64_t>(0, n.min_items - done) * (item + 1) + 1; };
      switch (f.stage) {
        case 0: return n.min_chars;
        case 1: return n.min_items == 0 ? 1 : sat(int64_t{n.min_items} * item + (n.min_items - 1) + 1);
        case 2: return sat(tail(f.count + 1));
        case 3: return sat(tail(f.count));
        default: return sat(item + tail(f.count + 1));
      }
    }
    case Kind::kObject: {
      const size_t i = static_cast<size_t>(f.count);
      switch (f.stage) {
        case 0: return n.min_chars;
        case 1: return sat(object_tail(n, i, true));
        case 2: {
          int64_t best = kInfinite;
          for (size_t j = 0; j < n.props.size(); ++j) {
            if (!(f.mask >> j & 1)) continue;
            best = std::min<int64_t>(best, static_cast<int64_t>(n.props[j].key.size()) - f.pos + 1 +
                                               n.props[j].value->min_chars + object_tail(n, j + 1, false));
          }
          return sat(best);
        }
        case 3: return sat(1 + int64_t{n.props[i].value->min_chars} + object_tail(n, i + 1, false));
        case 4: return sat(object_tail(n, i + 1, false));
        case 5: return sat(object_tail(n, i, false));
        default: {
          if (object_tail(n, i, true) > 1) return sat(object_tail(n, i, true));
          int64_t best = kInfinite;
          for (size_t j = i; j < n.props.size(); ++j) {
            best = std::min<int64_t>(best, static_cast<int64_t>(n.props[j].key.size()) + 1 + n.props[j].value->min_chars + 1);
          }
          return sat(best);
        }
      }
    }
    case Kind::kFreeObject:
      switch (f.stage) {
        case 0: return 2;
        case 1: return 1;
        case 2: return 3;  // key open (its frame counts itself): ':' + value + '}'
        case 3: return 3;
        case 4: return 1;
        case 5: return 1;
        default: return 5;  // "" : 0 }
      }
  }
  return kInfinite;
}

Matcher::StringRoom Matcher::free_string_room() const {
  if (dead_ || stack_.empty()) return {};
  const Frame& f = stack_.back();
  if (f.node->kind != Kind::kString || f.stage != 1) return {};
  return {.room = f.node->max_len < 0 ? INT32_MAX : std::max(0, f.node->max_len - f.count),
          .short_by = std::max(0, f.node->min_len - f.count)};
}

int32_t Matcher::min_remaining() const {
  if (dead_) return -1;
  int64_t sum = 0;
  for (size_t i = 0; i < stack_.size(); ++i) sum += frame_remaining(stack_[i]);
  return sat(sum);
}

}  // namespace tessera::grammar
