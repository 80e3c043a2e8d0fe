// Pre-tokenization for byte-level BPE (private to worker): a pipeline of regex splits
// (Hugging Face Split / Digits / Whitespace) ending in a ByteLevel step, run with PCRE2 in
// UTF mode with Unicode properties (\p{L}, \p{N}, \s). Invalid UTF-8 in the input is allowed:
// no pattern matches it, so its bytes stay in the gaps between matches.
//
// Immutable after construction and thread-safe (match data is per call).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/common/result.h"

struct pcre2_real_code_8;

namespace tessera::tok {

// The GPT-2 regex that Hugging Face's ByteLevel pre-tokenizer uses when use_regex is true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class Regex {
 public:
  // literal: the pattern is a plain string (HF Split {"String": ...}).
  static Result<std::shared_ptr<const Regex>> compile(std::string_view pattern, bool literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Appends the [begin, end) byte ranges of all non-overlapping non-empty matches, in order.
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  explicit Regex(pcre2_real_code_8* code) : code_(code) {}
  pcre2_real_code_8* code_;
};

// Hugging Face SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // kSplit, or kByteLevel with use_regex (GPT-2 pattern)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;            // kSplit: the non-matching parts are the delimiters
  bool add_prefix_space = false;  // kByteLevel: prepend ' ' to a split not starting with one
};

class PreTokenizer {
 public:
  // Steps run in order; a ByteLevel step, if any, must be the last (checked by the builder).
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}
  // Replaces `splits` (initially the whole text run) with the pre-tokens.
  void run(std::vector<std::string>& splits) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace tessera::tok
