// Chat templates rendered in C++ (no Jinja engine). A model's Jinja template (tokenizer
// config `chat_template`, GGUF `tokenizer.chat_template`) is *recognized*, not executed:
//   contains "<|im_start|>"       -> ChatML (SmolLM2, Qwen2); a default system prompt written
//                                    literally in the template is kept
//   contains "<|start_header_id|>" -> Llama-3
//   contains "[INST]"             -> Llama-2
//   anything else, or no template -> built-in ChatML without a default system prompt
// docs/api.md shows the exact text each one produces.
//
// A rendered chat is a list of segments; special segments ("<|im_start|>", "<s>") become a
// single token id when the tokenizer has that piece, plain text is tokenized without adding
// BOS. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/protocol.h"

namespace tessera::frontend {

enum class ChatTemplateKind { kChatML, kLlama2, kLlama3 };

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kChatML;
  std::string default_system;  // ChatML only: used when the chat has no system message
  bool builtin = true;         // true when no known template was recognized
};

const char* chat_template_name(ChatTemplateKind kind);  // "chatml", "llama2", "llama3"
// Recognizes a Jinja template string (see above).
ChatTemplate detect_chat_template(std::string_view jinja);

struct ChatSegment {
  std::string text;
  bool special = false;  // one special token (when the vocabulary has it), else plain text
};

struct RenderedChat {
  std::vector<ChatSegment> segments;
  std::vector<std::string> stop_pieces;  // end-of-turn pieces ("<|im_end|>", "<|eot_id|>")
  std::string text() const;              // all segments concatenated (for tests and logs)
};

// Renders messages followed by the assistant generation prompt. A "system" message that is
// not first is an error (kInvalidArgument naming the index); so is an empty chat.
Result<RenderedChat> render_chat(const ChatTemplate& tmpl, const std::vector<protocol::ChatMessage>& messages);

}  // namespace tessera::frontend
