// Hugging Face tokenizer.json normalizers (the `normalizer` section), applied to the text of
// each segment between added tokens before pre-tokenization, as tokenizers does:
//   NFC, NFD, NFKC, NFKD   Unicode normalization forms (libutf8proc)
//   Lowercase              simple per-code-point lower-casing (utf8proc_tolower)
//   Replace                a literal String pattern -> content (a Regex pattern is refused)
//   Prepend                `prepend` in front of a non-empty text
//   Sequence               the above in order
// Anything else is refused by name when the tokenizer loads. Text that is not valid UTF-8 is
// passed through unchanged by the Unicode forms (tokenizers cannot hold such text at all).
// Immutable after parse(); thread-safe.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"

namespace tessera::tok {

class Normalizer {
 public:
  // `j` is the tokenizer.json `normalizer` value (null = none). kUnsupported names the type.
  static Result<Normalizer> parse(const std::string& path, const nlohmann::json& j);
  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kReplace, kPrepend };
  struct Step {
    Kind kind;
    std::string from;  // Replace: pattern; Prepend: the prefix
    std::string to;    // Replace: content
  };
  std::vector<Step> steps_;
};

}  // namespace tessera::tok
