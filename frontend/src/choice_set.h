// Private: the sequences behind one OpenAI request (docs/api.md "Several choices"). A request
// with a prompt list, `n` or `best_of` runs prompts x best_of sequences, each an ordinary
// scheduler request with its own id, seed and Generation (generation.h); this class turns their
// events into one response: streamed chunks carrying each choice's `index`, or one body whose
// choices are the n most likely candidates of each prompt (best_of, ranked by cumulative
// log-probability as vLLM does), with usage that counts each prompt once.
//
// Sharing the prompt's pages: the first candidate of a prompt is submitted at once; the others
// only when its first event arrives. By then the scheduler has indexed the prompt's full pages
// in its radix cache (a prefill chunk's pages are indexed when the chunk completes), and the
// frontend routes them with the same routing key to the same scheduler and worker, so they
// reuse those pages (copy-on-write of a partial last page) and compute only the last prompt
// token. A prompt of at most one page has nothing worth sharing: all its candidates go at once.
//
// echo + logprobs (completions): only the first candidate of a prompt asks the scheduler for the
// prompt's log-probabilities (sampling.prompt_logprobs; they arrive in a token event without
// tokens before its first token); every choice of that prompt starts with them.
//
// Ownership: owns the sequences' Generations; references the tokenizer (which outlives it).
// Threading: not thread-safe; one connection's coroutine uses it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/common/protocol.h"
#include "tessera/frontend/generation.h"
#include "tessera/frontend/openai.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::frontend {

struct ChoiceSetOptions {
  int32_t n = 1;
  int32_t best_of = 1;        // >= n; > n only when not streaming
  bool streaming = false;
  bool logprobs = false;      // the client asked for them
  int32_t page_size = 0;      // 0 = unknown: later candidates always wait for the first
  // Tool calls (tool_calls.h): each choice's text is parsed at its end; a stream holds the text
  // back until then and sends either the content or the calls (tool_calls_chunk).
  bool tools = false;
  bool tools_forced = false;
  ToolFormat tool_format = ToolFormat::kHermes;
  // tool_choice "required" with several tools (the grammar fixes only the name): each tool's
  // `parameters` and forcing grammar by name. A call whose arguments its tool does not accept is
  // generated again (once, new id) with that tool named, so its grammar enforces them; the stream
  // then holds the call back until the choice ends. Null: no check.
  std::shared_ptr<const std::map<std::string, RequiredTool>> check_arguments;
};

class ChoiceSet {
 public:
  // `prompts`: one prepared request per prompt (prepare() and finish() done, seed set);
  // `echo`: the text to put in front of each choice of that prompt ("" = no echo).
  // `next_id` gives each sequence its frontend request id.
  ChoiceSet(const Tokenizer& tokenizer, ResponseMeta meta, ChoiceSetOptions options,
            std::vector<protocol::GenerateRequest> prompts, std::vector<std::string> echo,
            const std::function<uint64_t()>& next_id);

  // What the caller does after a step.
  struct Output {
    std::string sse;                                // streaming: chunks to write now
    std::vector<uint64_t> cancel;                   // a stop string ended these: cancel at the scheduler
    std::vector<protocol::GenerateRequest> submit;  // sequences to submit now
    std::optional<Error> error;                     // a sequence failed: the whole request fails
    std::optional<protocol::FinalEvent> finished;   // a sequence ended (for the metrics)
    FactCallCounts stripped;                        // its removed retrieve_fact calls
  };
  // The sequences to submit at the start.
  std::vector<protocol::GenerateRequest> start();
  // One scheduler event of one of the sequences (events of unknown ids are ignored).
  Output on_message(const protocol::Message& m);

  bool done() const;                      // every sequence has ended
  std::vector<uint64_t> live_ids() const;  // submitted and not ended (to abandon)
  int32_t sequences() const { return static_cast<int32_t>(seqs_.size()); }
  int32_t completion_tokens() const;      // over every sequence so far
  int32_t prompt_tokens() const;          // each prompt once
  // After done(): usage (prompt and cached tokens of each prompt's first sequence once,
  // completion tokens of every sequence) and timings (earliest queue/ttft, latest decode/total).
  protocol::FinalEvent total() const;
  // After done(): the non-streamed response body.
  std::string response_body() const;
  // The access log's finish reason: the choices' reasons, distinct, joined by ','.
  std::string finish_reasons() const;

 private:
  struct Seq {
    uint64_t id = 0;
    int32_t prompt = 0;
    int32_t candidate = 0;
    int32_t prompt_len = 0;             // prompt tokens
    protocol::GenerateRequest request;  // moved out when submitted
    std::unique_ptr<Generation> gen;
    bool submitted = false, done = false, cancel_sent = false, first_chunk = true;
    std::string echo;  // streaming: not yet sent
    int32_t lp_offset = 0;  // streaming: text_offset of the next logprobs entry (code points sent before it)
    // Streaming a forced tool call: its id and name once the name is complete, and the end of
    // the arguments text already sent (an offset into the generated text; 0 = not started).
    std::optional<ToolCall> call;
    size_t args_sent = 0;
    // check_arguments: the request as first submitted, to generate the call again once.
    protocol::GenerateRequest retry;
    bool retried = false;
    int32_t earlier_tokens = 0;  // completion tokens of the discarded attempt
    std::string finish_reason;
    protocol::FinalEvent final;
    double cumulative_logprob = 0.0;
  };
  Seq* find(uint64_t id);
  void release_candidates(int32_t prompt, Output& out);
  // The next piece of a streamed forced call ("" when nothing new); `final`: the rest.
  std::string call_piece(Seq& s, bool final, std::string_view reason, const protocol::FinalEvent* final_event);
  std::string chunk(Seq& s, const std::string& text, const std::vector<TokenLogprobText>& logprobs, std::string_view reason,
                    const protocol::FinalEvent* final_event);

  // echo + logprobs: one prompt's entries (token text, text_offset; log-probabilities once its
  // first candidate's scheduler event brought them), put in front of each of its choices.
  std::vector<TokenLogprobText> prompt_entries(const protocol::GenerateRequest& prompt) const;
  std::vector<TokenLogprobText> with_prompt(int32_t prompt, const std::vector<TokenLogprobText>& generated) const;

  const Tokenizer& tok_;
  std::function<uint64_t()> next_id_;
  ResponseMeta meta_;
  ChoiceSetOptions options_;
  std::vector<std::string> echo_;
  std::vector<std::vector<TokenLogprobText>> prompt_lps_;  // per prompt; empty = not asked
  std::vector<Seq> seqs_;  // prompt-major: seqs_[prompt * best_of + candidate]
};

}  // namespace tessera::frontend
