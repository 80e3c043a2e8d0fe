// The retrieve_fact output filter (DESIGN.md, DKI; seed 000 "F1-4 _strip_retrieve_fact_calls"):
// removes residual `retrieve_fact` tool calls from generated text before a client sees it, and
// counts them. Recognized calls (byte-exact; `ws` = spaces, tabs, CR, LF):
//   generic   retrieve_fact ws ( ... )                 parentheses balanced outside "..."/'...'
//             <tool_call> ... </tool_call>             whose body contains retrieve_fact
//   glm       <|tool_call|> ws retrieve_fact ws { ... }   JSON object balanced outside strings
//             retrieve_fact ws { ... }                 (GLM's bare name + arguments)
//   deepseek  <｜tool▁call▁begin｜> ... <｜tool▁call▁end｜>   whose body contains retrieve_fact
//             <｜tool▁calls▁begin｜> ws (call ws)+ <｜tool▁calls▁end｜>   when every call in it is
//             a retrieve_fact call (otherwise only those calls go and the wrapper stays)
// A bare `retrieve_fact` must not follow a letter, digit or '_' (so "my_retrieve_fact(x)" stays).
// A candidate that grows past max_call_bytes without closing is judged not to be a call and
// released as text; one still open at finish() (generation cut off inside a call) is removed.
//
// Streaming: push() returns the text that can be shown now; it holds back any suffix that might
// still become a call (a prefix of a marker, or an open call) and releases it as soon as it
// cannot. So no byte of a call is ever emitted, whatever the chunking, and
// concat(push(c1), push(c2), ..., finish()) == strip_retrieve_fact_calls(c1 + c2 + ...).text
// whenever no candidate outgrows max_call_bytes (the one-shot function has no such limit).
// Cuts happen only at the ASCII bytes '<' and 'r' or after a whole call, so UTF-8 sequences of
// the input are never split.
//
// Not thread-safe: one filter per response stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::frontend {

struct FactCallCounts {
  uint64_t generic = 0;
  uint64_t deepseek = 0;
  uint64_t glm = 0;
  uint64_t total() const { return generic + deepseek + glm; }
  bool operator==(const FactCallCounts&) const = default;
};

class RetrieveFactFilter {
 public:
  static constexpr size_t kDefaultMaxCallBytes = 8192;
  explicit RetrieveFactFilter(size_t max_call_bytes = kDefaultMaxCallBytes) : max_call_bytes_(max_call_bytes) {}

  std::string push(std::string_view chunk);  // text safe to emit now
  std::string finish();                      // the rest (call again: "")
  const FactCallCounts& counts() const { return counts_; }
  size_t held_bytes() const { return pending_.size(); }

 private:
  std::string drain(bool final);

  size_t max_call_bytes_;
  std::string pending_;     // held back: might still start a call
  char prev_ = '\0';        // last byte emitted (word boundary of a bare retrieve_fact)
  FactCallCounts counts_;
};

struct StripResult {
  std::string text;
  FactCallCounts counts;
};
StripResult strip_retrieve_fact_calls(std::string_view text);

}  // namespace tessera::frontend
