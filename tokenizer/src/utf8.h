// UTF-8 helpers shared by the tokenizers and the incremental decoder (private to worker).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::tok {

// Appends the UTF-8 encoding of code point `cp` (<= 0x10FFFF, not a surrogate) to `out`.
void append_utf8(uint32_t cp, std::string& out);

// Length of the UTF-8 character starting at s[i]: 1..4 for a well-formed sequence that fits
// in `s`, 1 for any ill-formed or truncated byte (so callers can treat it as a lone byte).
size_t utf8_char_len(std::string_view s, size_t i);

// Streaming UTF-8 validator with WHATWG/Unicode "maximal subpart" replacement: each maximal
// ill-formed subsequence becomes one U+FFFD. Feeding a byte string in any number of pieces
// and then calling finish() produces exactly the same output as feeding it in one piece, which
// is what lets IncrementalDecoder::push() + flush() equal Tokenizer::decode().
// Not thread-safe (one per stream).
class Utf8Sanitizer {
 public:
  // Appends the complete, valid characters that `bytes` completes to `out`; bytes of a
  // still-incomplete character are held.
  void feed(std::string_view bytes, std::string& out);
  // Appends U+FFFD if an incomplete character is held, and resets.
  void finish(std::string& out);
  bool holding() const { return !held_.empty(); }
  const std::string& held() const { return held_; }

 private:
  void feed_byte(unsigned char b, std::string& out);
  std::string held_;      // bytes of the current incomplete character
  int need_ = 0;          // continuation bytes still expected
  unsigned char lo_ = 0x80, hi_ = 0xBF;  // allowed range of the next continuation byte
};

// Returns `bytes` with every ill-formed subsequence replaced by U+FFFD (same policy as above).
std::string sanitize_utf8(std::string_view bytes);

}  // namespace tessera::tok
