#include "tessera/frontend/chat_template.h"

namespace tessera::frontend {
namespace {

// The literal default system prompt of a ChatML template: the text between
// "<|im_start|>system\n" and "<|im_end|>" when it contains no Jinja syntax.
std::string chatml_default_system(std::string_view jinja) {
  static constexpr std::string_view kOpen = "<|im_start|>system\\n";  // escaped inside Jinja strings
  static constexpr std::string_view kOpenRaw = "<|im_start|>system\n";
  for (std::string_view open : {kOpen, kOpenRaw}) {
    size_t at = jinja.find(open);
    while (at != std::string_view::npos) {
      size_t start = at + open.size();
      size_t end = jinja.find("<|im_end|>", start);
      if (end == std::string_view::npos) break;
      std::string_view body = jinja.substr(start, end - start);
      if (!body.empty() && body.find('{') == std::string_view::npos && body.find('\'') == std::string_view::npos &&
          body.find('"') == std::string_view::npos)
        return std::string(body);
      at = jinja.find(open, start);
    }
  }
  return "";
}

void text(RenderedChat& out, std::string s) { out.segments.push_back({std::move(s), false}); }
void special(RenderedChat& out, std::string s) { out.segments.push_back({std::move(s), true}); }

Status check_roles(const std::vector<protocol::ChatMessage>& messages) {
  if (messages.empty()) return make_error(ErrorCode::kInvalidArgument, "messages must not be empty");
  for (size_t i = 1; i < messages.size(); ++i)
    if (messages[i].role == "system")
      return make_error(ErrorCode::kInvalidArgument, "messages[" + std::to_string(i) + "]: a system message must come first");
  return ok_status();
}

RenderedChat render_chatml(const ChatTemplate& t, const std::vector<protocol::ChatMessage>& messages) {
  RenderedChat out;
  auto turn = [&](const std::string& role, const std::string& content) {
    special(out, "<|im_start|>");
    text(out, role + "\n" + content);
    special(out, "<|im_end|>");
    text(out, "\n");
  };
  if (messages.front().role != "system" && !t.default_system.empty()) turn("system", t.default_system);
  for (const auto& m : messages) turn(m.role, m.content);
  special(out, "<|im_start|>");
  text(out, "assistant\n");
  out.stop_pieces = {"<|im_end|>"};
  return out;
}

// Meta's Llama-2 chat format: each user turn is "<s>[INST] ... [/INST]", the system prompt is
// folded into the first user turn inside <<SYS>> markers, and an answered turn ends " </s>".
RenderedChat render_llama2(const std::vector<protocol::ChatMessage>& messages) {
  RenderedChat out;
  size_t i = 0;
  std::string system;
  if (messages[0].role == "system") {
    system = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n";
    i = 1;
  }
  bool first = true;
  for (; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (m.role == "user") {
      special(out, "<s>");
      text(out, "[INST] " + (first ? system : std::string()) + m.content + " [/INST]");
      first = false;
    } else {  // assistant
      text(out, " " + m.content + " ");
      special(out, "</s>");
    }
  }
  out.stop_pieces = {"</s>"};
  return out;
}

RenderedChat render_llama3(const std::vector<protocol::ChatMessage>& messages) {
  RenderedChat out;
  special(out, "<|begin_of_text|>");
  for (const auto& m : messages) {
    special(out, "<|start_header_id|>");
    text(out, m.role);
    special(out, "<|end_header_id|>");
    text(out, "\n\n" + m.content);
    special(out, "<|eot_id|>");
  }
  special(out, "<|start_header_id|>");
  text(out, "assistant");
  special(out, "<|end_header_id|>");
  text(out, "\n\n");
  out.stop_pieces = {"<|eot_id|>"};
  return out;
}

}  // namespace

const char* chat_template_name(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kChatML: return "chatml";
    case ChatTemplateKind::kLlama2: return "llama2";
    case ChatTemplateKind::kLlama3: return "llama3";
  }
  return "?";
}

ChatTemplate detect_chat_template(std::string_view jinja) {
  if (jinja.find("<|im_start|>") != std::string_view::npos)
    return ChatTemplate{ChatTemplateKind::kChatML, chatml_default_system(jinja), false};
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) return ChatTemplate{ChatTemplateKind::kLlama3, "", false};
  if (jinja.find("[INST]") != std::string_view::npos) return ChatTemplate{ChatTemplateKind::kLlama2, "", false};
  return ChatTemplate{ChatTemplateKind::kChatML, "", true};
}

std::string RenderedChat::text() const {
  std::string s;
  for (const auto& seg : segments) s += seg.text;
  return s;
}

Result<RenderedChat> render_chat(const ChatTemplate& tmpl, const std::vector<protocol::ChatMessage>& messages) {
  TS_TRY(check_roles(messages));
  switch (tmpl.kind) {
    case ChatTemplateKind::kChatML: return render_chatml(tmpl, messages);
    case ChatTemplateKind::kLlama2: return render_llama2(messages);
    case ChatTemplateKind::kLlama3: return render_llama3(messages);
  }
  return make_error(ErrorCode::kInternal, "unknown chat template kind");
}

}  // namespace tessera::frontend
