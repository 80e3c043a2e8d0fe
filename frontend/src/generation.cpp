#include "tessera/frontend/generation.h"

namespace tessera::frontend {

Generation::Generation(const Tokenizer& tokenizer, std::vector<std::string> stop, bool logprobs)
    // The completion continues a sequence whose start (the prompt) was not pushed, so the
    // first generated piece keeps its leading space.
    : tok_(tokenizer), decoder_(tokenizer, /*sequence_start=*/false), stop_(std::move(stop)), want_logprobs_(logprobs) {}

Generation::Delta Generation::on_tokens(const protocol::TokenEvent& event) {
  Delta d;
  if (stop_.stopped()) return d;
  for (size_t i = 0; i < event.tokens.size(); ++i) {
    const int32_t t = event.tokens[i];
    d.tokens.push_back(t);
    tokens_.push_back(t);
    if (want_logprobs_) {
      TokenLogprobText lp;
      lp.token = tok_.token_bytes(t);
      lp.logprob = i < event.logprobs.size() ? event.logprobs[i] : 0.0f;
      if (i < event.top_logprobs.size())
        for (const auto& alt : event.top_logprobs[i]) lp.top.emplace_back(tok_.token_bytes(alt.token), alt.logprob);
      d.logprobs.push_back(lp);
      logprobs_.push_back(std::move(lp));
    }
    const std::string piece = decoder_.push(t);
    d.text += stop_.push(facts_.push(piece));  // order: generation.h
    if (stop_.stopped()) break;
  }
  text_ += d.text;
  return d;
}

std::string Generation::finish() {
  std::string tail;
  if (!stop_.stopped()) {
    std::string rest = facts_.push(decoder_.flush());
    rest += facts_.finish();
    tail = stop_.push(rest);
  }
  tail += stop_.flush();
  text_ += tail;
  return tail;
}

}  // namespace tessera::frontend
