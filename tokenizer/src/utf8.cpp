#include "utf8.h"

namespace tessera::tok {
namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t utf8_char_len(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < lo || b > hi) return 1;
    lo = 0x80;
    hi = 0xBF;
  }
  return n;
}

void Utf8Sanitizer::feed_byte(unsigned char b, std::string& out) {
  if (need_ > 0) {
    if (b >= lo_ && b <= hi_) {
      held_.push_back(static_cast<char>(b));
      lo_ = 0x80;
      hi_ = 0xBF;
      if (--need_ == 0) {
        out += held_;
        held_.clear();
      }
      return;
    }
    // The held prefix is a maximal ill-formed subpart; `b` starts afresh.
    out += kReplacement;
    held_.clear();
    need_ = 0;
    lo_ = 0x80;
    hi_ = 0xBF;
  }
  if (b < 0x80) {
    out.push_back(static_cast<char>(b));
    return;
  }
  if (b >= 0xC2 && b <= 0xDF) {
    need_ = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need_ = 2;
    if (b == 0xE0) lo_ = 0xA0;
    if (b == 0xED) hi_ = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need_ = 3;
    if (b == 0xF0) lo_ = 0x90;
    if (b == 0xF4) hi_ = 0x8F;
  } else {
    out += kReplacement;  // a continuation byte out of place, C0/C1, F5..FF
    return;
  }
  held_.push_back(static_cast<char>(b));
}

void Utf8Sanitizer::feed(std::string_view bytes, std::string& out) {
  for (char c : bytes) feed_byte(static_cast<unsigned char>(c), out);
}

void Utf8Sanitizer::finish(std::string& out) {
  if (!held_.empty()) out += kReplacement;
  held_.clear();
  need_ = 0;
  lo_ = 0x80;
  hi_ = 0xBF;
}

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  Utf8Sanitizer s;
  s.feed(bytes, out);
  s.finish(out);
  return out;
}

}  // namespace tessera::tok
