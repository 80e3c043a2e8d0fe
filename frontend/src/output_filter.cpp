// The retrieve_fact output filter (output_filter.h has the grammar and the streaming contract).
#include "tessera/frontend/output_filter.h"

#include <array>

namespace tessera::frontend {
namespace {

constexpr std::string_view kName = "retrieve_fact";
constexpr std::string_view kToolCall = "<tool_call>";
constexpr std::string_view kToolCallEnd = "</tool_call>";
constexpr std::string_view kGlmCall = "<|tool_call|>";
constexpr std::string_view kDsCall = "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>";
constexpr std::string_view kDsCallEnd = "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>";
constexpr std::string_view kDsCalls = "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>";
constexpr std::string_view kDsCallsEnd = "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>";
constexpr size_t npos = std::string_view::npos;

enum class State { kNo, kMaybe, kYes };
enum class Format { kGeneric, kDeepSeek, kGlm };

struct Match {
  State state = State::kNo;
  size_t len = 0;  // bytes of the call (kYes)
  Format format = Format::kGeneric;
  uint64_t calls = 1;
};
Match no() { return {}; }
Match maybe() { return {.state = State::kMaybe}; }
Match yes(size_t len, Format f, uint64_t calls = 1) { return {.state = State::kYes, .len = len, .format = f, .calls = calls}; }

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
size_t skip_ws(std::string_view s, size_t j) {
  while (j < s.size() && is_ws(s[j])) ++j;
  return j;
}

// s[j..] against literal m: kYes (starts with m), kMaybe (s ends inside a prefix of m), kNo.
State literal(std::string_view s, size_t j, std::string_view m) {
  const std::string_view rest = s.substr(std::min(j, s.size()));
  if (rest.size() >= m.size()) return rest.substr(0, m.size()) == m ? State::kYes : State::kNo;
  return m.substr(0, rest.size()) == rest ? State::kMaybe : State::kNo;
}

// s[j] is `open`; returns the index after the matching close, or npos while unclosed. Quotes
// (`quotes` lists them) hide brackets; a backslash escapes the next byte inside a quote.
size_t balanced(std::string_view s, size_t j, char open, char close, std::string_view quotes) {
  int depth = 0;
  char quote = 0;
  for (size_t k = j; k < s.size(); ++k) {
    const char c = s[k];
    if (quote) {
      if (c == '\\') {
        ++k;
      } else if (c == quote) {
        quote = 0;
      }
    } else if (quotes.find(c) != npos) {
      quote = c;
    } else if (c == open) {
      ++depth;
    } else if (c == close && --depth == 0) {
      return k + 1;
    }
  }
  return npos;
}

// retrieve_fact ws ( ... )  or  retrieve_fact ws { ... }, at s[j]; `final` = no more input.
Match bare_call(std::string_view s, size_t j, bool final, size_t start) {
  const State st = literal(s, j, kName);
  if (st != State::kYes) return st == State::kMaybe && !final ? maybe() : no();
  const size_t k = skip_ws(s, j + kName.size());
  if (k >= s.size()) return final ? no() : maybe();
  const bool paren = s[k] == '(';
  if (!paren && s[k] != '{') return no();
  const size_t end = paren ? balanced(s, k, '(', ')', "\"'") : balanced(s, k, '{', '}', "\"");
  const Format f = paren ? Format::kGeneric : Format::kGlm;
  if (end == npos) return final ? yes(s.size() - start, f) : maybe();
  return yes(end - start, f);
}

// open ... close whose body contains retrieve_fact.
Match delimited(std::string_view s, std::string_view open, std::string_view close, Format f, bool final) {
  const State st = literal(s, 0, open);
  if (st != State::kYes) return st == State::kMaybe && !final ? maybe() : no();
  const size_t end = s.find(close, open.size());
  const std::string_view body = s.substr(open.size(), end == npos ? npos : end - open.size());
  const bool ours = body.find(kName) != npos;
  if (end != npos) return ours ? yes(end + close.size(), f) : no();
  if (final) return ours ? yes(s.size(), f) : no();
  return maybe();
}

Match glm_call(std::string_view s, bool final) {
  const State st = literal(s, 0, kGlmCall);
  if (st != State::kYes) return st == State::kMaybe && !final ? maybe() : no();
  const size_t j = skip_ws(s, kGlmCall.size());
  if (j >= s.size()) return final ? no() : maybe();
  Match m = bare_call(s, j, final, 0);
  if (m.state == State::kYes) m.format = Format::kGlm;
  if (m.state == State::kYes && s[skip_ws(s, j + kName.size())] != '{') return no();  // GLM args are JSON
  return m;
}

// <｜tool▁calls▁begin｜> ws (call ws)+ <｜tool▁calls▁end｜>, every call a retrieve_fact call.
Match deepseek_calls(std::string_view s, bool final) {
  const State st = literal(s, 0, kDsCalls);
  if (st != State::kYes) return st == State::kMaybe && !final ? maybe() : no();
  size_t j = kDsCalls.size();
  uint64_t calls = 0;
  for (;;) {
    j = skip_ws(s, j);
    if (j >= s.size()) return final ? no() : maybe();
    const State end = literal(s, j, kDsCallsEnd);
    if (end == State::kYes) return calls > 0 ? yes(j + kDsCallsEnd.size(), Format::kDeepSeek, calls) : no();
    const Match c = delimited(s.substr(j), kDsCall, kDsCallEnd, Format::kDeepSeek, final);
    if (c.state == State::kYes && j + c.len <= s.size() && literal(s, j, kDsCall) == State::kYes &&
        s.find(kDsCallEnd, j) != npos) {
      j += c.len;
      ++calls;
      continue;
    }
    if ((c.state == State::kMaybe || end == State::kMaybe) && !final) return maybe();
    return no();
  }
}

// Longest-lived candidate at s[0]; prev = the byte before s[0].
Match match_at(std::string_view s, char prev, bool final) {
  if (s.empty()) return no();
  if (s[0] == 'r') return is_word(prev) ? no() : bare_call(s, 0, final, 0);
  if (s[0] != '<') return no();
  const std::array<Match, 4> all = {delimited(s, kToolCall, kToolCallEnd, Format::kGeneric, final), glm_call(s, final),
                                    deepseek_calls(s, final), delimited(s, kDsCall, kDsCallEnd, Format::kDeepSeek, final)};
  bool any_maybe = false;
  for (const Match& m : all) any_maybe = any_maybe || m.state == State::kMaybe;
  if (any_maybe) return maybe();  // wait until every reading is decided (e.g. the calls wrapper)
  for (const Match& m : all)
    if (m.state == State::kYes) return m;
  return no();
}

}  // namespace

std::string RetrieveFactFilter::drain(bool final) {
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const char prev = i > 0 ? pending_[i - 1] : prev_;
    Match m = match_at(std::string_view(pending_).substr(i), prev, final);
    if (m.state == State::kMaybe && pending_.size() - i > max_call_bytes_) m = no();  // too long to be a call
    if (m.state == State::kMaybe) break;
    if (m.state == State::kYes) {
      (m.format == Format::kGeneric ? counts_.generic : m.format == Format::kGlm ? counts_.glm : counts_.deepseek) += m.calls;
      out.append(pending_, 0, i);
      if (!out.empty()) prev_ = out.back();
      pending_.erase(0, i + m.len);
      i = 0;
      continue;
    }
    ++i;
  }
  out.append(pending_, 0, i);
  pending_.erase(0, i);
  if (!out.empty()) prev_ = out.back();
  return out;
}

std::string RetrieveFactFilter::push(std::string_view chunk) {
  pending_.append(chunk);
  return drain(false);
}

std::string RetrieveFactFilter::finish() { return drain(true); }

StripResult strip_retrieve_fact_calls(std::string_view text) {
  RetrieveFactFilter f(text.size() + 1);
  StripResult r;
  r.text = f.push(text);
  r.text += f.finish();
  r.counts = f.counts();
  return r;
}

}  // namespace tessera::frontend
