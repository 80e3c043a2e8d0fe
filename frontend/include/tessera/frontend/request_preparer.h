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
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::frontend {

class RequestPreparer {
 public:
  // Loads the tokenizer (GGUF vocabulary, tokenizer file or Hugging Face directory) and picks
  // the chat template (--chat-template, --chat-template-file, the model's).
  static Result<std::unique_ptr<RequestPreparer>> create(const FrontendConfig& config);

  const std::string& model_name() const { return model_name_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatTemplate& chat_template() const { return chat_template_; }

  // kNotFound (unknown model), kOutOfRange (token ids), kInvalidArgument (empty prompt,
  // preference without user, template errors), kTooLarge (prompt over the limit).
  Status prepare(protocol::GenerateRequest& request) const;
  void finish(protocol::GenerateRequest& request) const;

 private:
  RequestPreparer() = default;
  std::vector<int32_t> tokenize_chat(const RenderedChat& chat) const;

  std::string model_name_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatTemplate chat_template_;
  bool tokenizer_adds_bos_ = false;
  int32_t max_prompt_tokens_ = 0;
};

}  // namespace tessera::frontend
