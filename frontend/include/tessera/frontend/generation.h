// The frontend side of one running request: turns the scheduler's token ids into the text the
// client sees and keeps the counts for usage. One per request; not thread-safe. The text goes
// through three stages, in this order:
//   1. IncrementalDecoder: UTF-8-safe incremental detokenization;
//   2. RetrieveFactFilter (output_filter.h): residual retrieve_fact tool calls are removed;
//   3. StopFilter: stop strings.
// The call filter runs before the stop strings so that stop strings are matched on the text the
// client would see: a stop string written inside a removed call's arguments does not end the
// generation, and a stop string that a removed call splits in two ("a" + call + "b") does. The
// call filter holds back a possible call (at most kDefaultMaxCallBytes) and the stop filter
// a possible stop-string prefix, so neither a byte of a call nor part of a stop string is ever
// emitted, whatever the token boundaries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/protocol.h"
#include "tessera/frontend/openai.h"
#include "tessera/frontend/output_filter.h"
#include "tessera/frontend/stop_filter.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::frontend {

class Generation {
 public:
  // `stop`: the request's stop strings; `logprobs`: collect per-token logprob text.
  Generation(const Tokenizer& tokenizer, std::vector<std::string> stop, bool logprobs);

  struct Delta {
    std::string text;                       // new client-visible text (may be empty)
    std::vector<int32_t> tokens;            // tokens of this event that the client gets
    std::vector<TokenLogprobText> logprobs;  // parallel to tokens when requested
  };
  // Feeds one TokenEvent. After a stop string completes, stop_hit() is true and later events
  // give empty deltas (the caller cancels the request at the scheduler).
  Delta on_tokens(const protocol::TokenEvent& event);
  // At the final event: the text still held (decoder bytes, a partial stop-string prefix that
  // never completed).
  std::string finish();

  bool stop_hit() const { return stop_.stopped(); }
  // retrieve_fact calls removed so far (all of them once finish() was called).
  const FactCallCounts& stripped_calls() const { return facts_.counts(); }
  const std::string& text() const { return text_; }            // everything emitted so far
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<TokenLogprobText>& logprobs() const { return logprobs_; }
  int32_t completion_tokens() const { return static_cast<int32_t>(tokens_.size()); }

 private:
  const Tokenizer& tok_;
  IncrementalDecoder decoder_;
  RetrieveFactFilter facts_;
  StopFilter stop_;
  bool want_logprobs_;
  std::string text_;
  std::vector<int32_t> tokens_;
  std::vector<TokenLogprobText> logprobs_;
};

}  // namespace tessera::frontend
