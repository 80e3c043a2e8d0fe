#include "pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "utf8.h"

namespace tessera::tok {

Result<std::shared_ptr<const Regex>> Regex::compile(std::string_view pattern, bool literal) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  if (literal) opts |= PCRE2_LITERAL;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts, &err,
                                   &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return make_error(ErrorCode::kInvalidArgument, "bad pre-tokenizer regex '" + std::string(pattern) +
                                                       "' at offset " + std::to_string(err_off) + ": " +
                                                       reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: falls back to the interpreter
  return std::shared_ptr<const Regex>(new Regex(code));
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t start = 0;
  while (start < s.size()) {
    int rc = pcre2_match(code_, subject, s.size(), start, 0, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(code_, subject, s.size(), start, PCRE2_NO_JIT, md, nullptr);
    if (rc < 0) break;  // no further match (or a resource error: the rest stays one gap)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      start = e;
    } else {
      start = b + utf8_char_len(s, b);  // empty match: step over one character
    }
  }
  pcre2_match_data_free(md);
}

namespace {

struct Span {
  size_t begin, end;
  bool match;
};

// Splits one string by a regex with Hugging Face's SplitDelimiterBehavior semantics.
void split_one(const std::string& s, const PreTokenizerStep& step, std::vector<std::string>& out) {
  std::vector<std::pair<size_t, size_t>> matches;
  step.regex->find_all(s, matches);
  std::vector<Span> spans;
  size_t pos = 0;
  for (const auto& [b, e] : matches) {
    if (b > pos) spans.push_back({pos, b, step.invert});
    spans.push_back({b, e, !step.invert});
    pos = e;
  }
  if (pos < s.size()) spans.push_back({pos, s.size(), step.invert});

  std::vector<std::pair<size_t, size_t>> pieces;
  switch (step.behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& sp : spans) pieces.emplace_back(sp.begin, sp.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Span& sp : spans) {
        if (!sp.match) pieces.emplace_back(sp.begin, sp.end);
      }
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Span& sp : spans) {
        if (sp.match && !prev_match && !pieces.empty()) {
          pieces.back().second = sp.end;
        } else {
          pieces.emplace_back(sp.begin, sp.end);
        }
        prev_match = sp.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;  // in reverse order: "previous" is the following span
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !prev_match && !pieces.empty()) {
          pieces.back().first = it->begin;
        } else {
          pieces.emplace_back(it->begin, it->end);
        }
        prev_match = it->match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (const Span& sp : spans) {
        if (sp.match && prev_match) {
          pieces.back().second = sp.end;
        } else {
          pieces.emplace_back(sp.begin, sp.end);
        }
        prev_match = sp.match;
      }
      break;
    }
  }
  for (const auto& [b, e] : pieces) out.push_back(s.substr(b, e - b));
}

}  // namespace

void PreTokenizer::run(std::vector<std::string>& splits) const {
  std::vector<std::string> next;
  for (const PreTokenizerStep& step : steps_) {
    next.clear();
    for (std::string& s : splits) {
      if (step.kind == PreTokenizerStep::Kind::kByteLevel) {
        if (step.add_prefix_space && (s.empty() || s[0] != ' ')) s.insert(s.begin(), ' ');
        if (step.regex == nullptr) {
          next.push_back(std::move(s));
          continue;
        }
      }
      split_one(s, step, next);
    }
    splits.swap(next);
  }
}

}  // namespace tessera::tok
