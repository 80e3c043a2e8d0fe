// The frontend side of one running request: turns the scheduler's token ids into the text the
// client sees — UTF-8-safe incremental detokenization (IncrementalDecoder), then stop strings
// (StopFilter) — and keeps the counts for usage. One per request; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/protocol.h"
#include "tessera/frontend/openai.h"
#include "tessera/frontend/stop_filter.h"
#include "tessera/worker/tokenizer.h"

namespace tessera::frontend {

class Generation {
 public:
  // `stop`: the request's stop strings; `logprobs`: collect per-token logprob text.
  Generation(const worker::Tokenizer& tokenizer, std::vector<std::string> stop, bool logprobs);

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
  const std::string& text() const { return text_; }            // everything emitted so far
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<TokenLogprobText>& logprobs() const { return logprobs_; }
  int32_t completion_tokens() const { return static_cast<int32_t>(tokens_.size()); }

 private:
  const worker::Tokenizer& tok_;
  worker::IncrementalDecoder decoder_;
  StopFilter stop_;
  bool want_logprobs_;
  std::string text_;
  std::vector<int32_t> tokens_;
  std::vector<TokenLogprobText> logprobs_;
};

}  // namespace tessera::frontend
