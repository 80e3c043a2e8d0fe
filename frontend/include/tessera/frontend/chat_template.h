// Chat templates. The model's own Jinja template (tokenizer config `chat_template`, GGUF
// `tokenizer.chat_template`, or --chat-template-file) is rendered with tessera_jinja exactly as
// transformers' apply_chat_template renders it (messages, add_generation_prompt=true,
// bos_token, eos_token; tools and the messages' tool fields, see ChatTools). Only when there is no template, or it does not parse or
// fails a trial render, do the built-in formats stand in, with a warning in the log saying so;
// the recognizer then picks one from the template text:
//   contains "<|im_start|>"       -> ChatML (SmolLM2, Qwen2); a default system prompt written
//                                    literally in the template is kept
//   contains "<|start_header_id|>" -> Llama-3
//   contains "[INST]"             -> Llama-2
//   anything else, or no template -> built-in ChatML without a default system prompt
// docs/api.md shows the exact text each built-in one produces.
//
// A rendered chat is a list of segments; special segments ("<|im_start|>", "<s>") become a
// single token id when the tokenizer has that piece, plain text is tokenized without adding
// BOS (added tokens written in it are still matched as single tokens). Pure functions;
// thread-safe (a loaded ChatTemplate is immutable and shared).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/common/protocol.h"
#include "tessera/jinja/template.h"

namespace tessera::frontend {

enum class ChatTemplateKind { kChatML, kLlama2, kLlama3, kJinja };

// How a model writes tool calls (tool_calls.h parses them).
enum class ToolFormat : uint8_t { kHermes, kLlama3, kMistral };
const char* tool_format_name(ToolFormat format);  // "hermes", "llama3", "mistral"
// "[TOOL_CALLS]" -> kMistral, "<tool_call>" -> kHermes, "<|start_header_id|>" -> kLlama3, else kHermes.
ToolFormat tool_format_for_template(std::string_view jinja);

// Tools of a chat request for the template (docs/api.md "Tool calls"): `tools` as the request
// gave them (null = none), and per message (parallel to the messages; may be empty) the extras
// HF transformers passes: "tool_calls" (arguments as objects when they parse), "tool_call_id",
// "name".
struct ChatTools {
  nlohmann::ordered_json tools;
  std::vector<nlohmann::ordered_json> extras;
};

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kChatML;
  std::string default_system;  // ChatML only: used when the chat has no system message
  bool builtin = true;         // true when no known template was recognized
  // kJinja only: the parsed template, the special-token strings it is given, and the pieces
  // that end an assistant turn (eos_token and the end-of-turn markers the template writes).
  std::shared_ptr<const jinja::Template> jinja;
  std::string bos_token;
  std::string eos_token;
  std::vector<std::string> stop_pieces;
  // kJinja whose text mentions `tools`: tools are passed to it; otherwise the Hermes fallback
  // block (a system-prompt section listing the tools) is written into the messages.
  bool handles_tools = false;
  ToolFormat tool_format = ToolFormat::kHermes;
};

const char* chat_template_name(ChatTemplateKind kind);  // "chatml", "llama2", "llama3", "jinja"
// Recognizes a Jinja template string (see above); the built-in fallback.
ChatTemplate detect_chat_template(std::string_view jinja);

struct SpecialTokenText {
  std::string bos;  // e.g. "<|begin_of_text|>", "<bos>"; "" when the model has none
  std::string eos;
};

// The model's own template as kJinja when it parses and renders a one-message trial chat;
// otherwise detect_chat_template(jinja) and a warning naming `origin` ("GGUF
// tokenizer.chat_template", "--chat-template-file x.jinja") and the reason.
ChatTemplate load_chat_template(std::string_view jinja, const SpecialTokenText& tokens, std::string_view origin);

struct ChatSegment {
  std::string text;
  bool special = false;  // one special token (when the vocabulary has it), else plain text
};

struct RenderedChat {
  std::vector<ChatSegment> segments;
  std::vector<std::string> stop_pieces;  // end-of-turn pieces ("<|im_end|>", "<|eot_id|>")
  bool places_bos = false;               // kJinja: the template wrote BOS itself if it wanted one
  std::string text() const;              // all segments concatenated (for tests and logs)
};

// Renders messages followed by the assistant generation prompt. An empty chat is an error
// (kInvalidArgument). Built-in formats: a "system" message that is not first is an error naming
// the index. kJinja: the template's own checks (raise_exception) and render errors come back as
// kInvalidArgument "chat template: ..." naming the message and line.
// `tools` (may be null): passed to a template that handles tools; otherwise the fallback: the
// Hermes block is prepended to the first system message (or becomes one), an assistant's
// tool_calls are appended to its content as <tool_call> blocks, and a "tool" message becomes a
// "user" message wrapped in <tool_response>.
Result<RenderedChat> render_chat(const ChatTemplate& tmpl, const std::vector<protocol::ChatMessage>& messages,
                                 const ChatTools* tools = nullptr);
// The fallback block for `tools` (an array of {"type":"function","function":{...}}).
std::string hermes_tools_block(const nlohmann::ordered_json& tools);

}  // namespace tessera::frontend
