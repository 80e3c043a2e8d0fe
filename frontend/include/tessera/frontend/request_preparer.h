// Request preparation: a validated protocol::GenerateRequest (openai.h or the client API) ->
// the request a scheduler gets (prompt_tokens, stop_token_ids, preference_tokens, routing_key;
// the wire message is the same GenerateRequest). Two steps, around the stored-preference lookup
// (stored_preferences.h):
//   prepare(): model check, chat template (chat_template.h), tokenization, vocabulary and
//              --max-prompt-tokens limits, "a preference needs a user";
//   finish():  tokenizes the (client's or stored) preference and fills `routing_key` with the
//              one routing-key policy (common/routing.h: client key, else user, else prompt
//              prefix).
// The caller admits the request (admission.h) before prepare(), so a refused request is never
// tokenized, and assigns `id`.
//
// Ownership: owns the tokenizer and the chat template, loaded once by create() from the model
// files. Threading: immutable after create(); every method is const and may run on any number of
// threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/common/protocol.h"
#include "tessera/common/result.h"
#include "tessera/frontend/chat_template.h"
#include "tessera/frontend/frontend.h"
#include "tessera/frontend/scheduler_links.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::frontend {

// What a client may read of this frontend's limits (docs/protocol.md "Limits", docs/api.md
// GET /v1/models/{id}); 0 = not known yet (no scheduler has said).
struct ServingLimits {
  std::string model;
  int32_t protocol_version = protocol::kProtocolVersion;
  int32_t context_length = 0;  // smallest over the live schedulers' workers
  int32_t page_size = 0;
  int32_t max_prompt_tokens = 0;
  int32_t vocab_size = 0;
  int32_t default_max_tokens = 0;
};

// The one set of request defaults and checks both APIs share (HTTP and ZeroMQ).
struct PrepareOptions {
  int32_t context_length = 0;    // 0 = unknown: no context check
  bool max_tokens_given = true;  // false: max_tokens = the default, capped to the context left
  bool seed_given = true;        // false: a random seed (a given `seed` makes sampling reproducible)
  const ChatTools* tools = nullptr;  // chat: tools and the messages' tool fields (HTTP API only)
  bool kv_policy_given = true;   // false: kv_policy = --kv-policy (the per-model default)
  // true: sampling.grammar is the one an earlier prompt of the same request had checked (a
  // completions prompt list): not compiled again.
  bool grammar_checked = false;
};

class RequestPreparer {
 public:
  // Loads the tokenizer (GGUF vocabulary, tokenizer file or Hugging Face directory) and picks
  // the chat template (--chat-template, --chat-template-file, the model's).
  static Result<std::unique_ptr<RequestPreparer>> create(const FrontendConfig& config);

  const std::string& model_name() const { return model_name_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatTemplate& chat_template() const { return chat_template_; }

  ServingLimits limits(const std::vector<SchedulerStatus>& schedulers) const;

  // kNotFound (unknown model), kOutOfRange (token ids), kInvalidArgument (empty prompt,
  // preference without user, template errors), kTooLarge (prompt over --max-prompt-tokens, or
  // prompt + max_tokens over the context: the message starts "This model's maximum context").
  Status prepare(protocol::GenerateRequest& request, const PrepareOptions& options = {}) const;
  void finish(protocol::GenerateRequest& request) const;

 private:
  RequestPreparer() = default;
  std::vector<int32_t> tokenize_chat(const RenderedChat& chat) const;
  // CacheBlend (documents.cpp): r.documents tokenized one by one into r.prompt_tokens, before the
  // prompt (completions) or the last user message's content (chat), with r.blend_chunks saying
  // where; r.documents is cleared (it does not travel further). Errors name `documents`.
  Status place_documents(protocol::GenerateRequest& r, const PrepareOptions& o) const;

  std::string model_name_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatTemplate chat_template_;
  bool tokenizer_adds_bos_ = false;
  int32_t max_prompt_tokens_ = 0;
  int32_t default_max_tokens_ = 0;
  KvPolicy default_kv_policy_{};
};

}  // namespace tessera::frontend
