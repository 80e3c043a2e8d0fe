#include "tessera/frontend/chat_template.h"

#include "tessera/common/log.h"

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

// Splits a rendered template at the BOS/EOS strings: those become special segments (so a
// tokenizer that does not match them in text, like llama2.c's, still gets their ids); added
// tokens elsewhere in the text are matched by the tokenizer's encode().
std::vector<ChatSegment> segment(const std::string& s, const ChatTemplate& t) {
  std::vector<ChatSegment> out;
  size_t start = 0, pos = 0;
  while (pos < s.size()) {
    const std::string* hit = nullptr;
    for (const std::string* tok : {&t.bos_token, &t.eos_token}) {
      if (!tok->empty() && s.compare(pos, tok->size(), *tok) == 0) hit = tok;
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    if (pos > start) out.push_back({s.substr(start, pos - start), false});
    out.push_back({*hit, true});
    pos += hit->size();
    start = pos;
  }
  if (start < s.size()) out.push_back({s.substr(start), false});
  return out;
}

Result<RenderedChat> render_jinja(const ChatTemplate& t, const std::vector<protocol::ChatMessage>& messages,
                                  const ChatTools* tools = nullptr) {
  jinja::ChatTemplateInputs in;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    nlohmann::ordered_json msg = {{"role", m.role}, {"content", m.content}};
    if (tools != nullptr && i < tools->extras.size() && tools->extras[i].is_object()) {
      for (const auto& [k, v] : tools->extras[i].items()) msg[k] = v;
      // An assistant turn that only calls tools has no content (templates test `content`).
      if (m.content.empty() && msg.contains("tool_calls")) msg["content"] = nullptr;
    }
    in.messages.push_back(std::move(msg));
  }
  if (tools != nullptr && tools->tools.is_array() && !tools->tools.empty()) in.tools = tools->tools;
  in.add_generation_prompt = true;
  in.bos_token = t.bos_token;
  in.eos_token = t.eos_token;
  auto text = t.jinja->render(jinja::chat_template_variables(in));
  if (!text.ok()) return make_error(ErrorCode::kInvalidArgument, "chat template: " + text.error().message);
  RenderedChat out;
  out.segments = segment(*text, t);
  out.stop_pieces = t.stop_pieces;
  out.places_bos = true;
  return out;
}

// End-of-turn markers of the common families; those the template writes are stop pieces.
constexpr const char* kTurnEnds[] = {"<|im_end|>",  "<|eot_id|>",     "<|eom_id|>", "<end_of_turn>",
                                     "<|end|>",     "<|endoftext|>", "</s>",       "<｜end▁of▁sentence｜>"};

// The fallback for templates without tool support (chat_template.h render_chat).
std::vector<protocol::ChatMessage> with_fallback_tools(const std::vector<protocol::ChatMessage>& messages, const ChatTools& tools) {
  std::vector<protocol::ChatMessage> out;
  const bool have_tools = tools.tools.is_array() && !tools.tools.empty();
  const std::string block = have_tools ? hermes_tools_block(tools.tools) : std::string();
  if (have_tools && (messages.empty() || messages.front().role != "system")) out.push_back({"system", block});
  for (size_t i = 0; i < messages.size(); ++i) {
    protocol::ChatMessage m = messages[i];
    const nlohmann::ordered_json* extra = i < tools.extras.size() && tools.extras[i].is_object() ? &tools.extras[i] : nullptr;
    if (i == 0 && have_tools && m.role == "system") m.content = block + "\n\n" + m.content;
    if (extra != nullptr && extra->contains("tool_calls")) {
      for (const auto& call : (*extra)["tool_calls"]) {
        const auto& f = call.contains("function") ? call["function"] : call;
        nlohmann::ordered_json c = {{"name", f.value("name", "")}, {"arguments", f.contains("arguments") ? f["arguments"] : nullptr}};
        m.content += (m.content.empty() ? "" : "\n") + std::string("<tool_call>\n") + c.dump() + "\n</tool_call>";
      }
    }
    if (m.role == "tool") {
      m.role = "user";
      m.content = "<tool_response>\n" + m.content + "\n</tool_response>";
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

std::string hermes_tools_block(const nlohmann::ordered_json& tools) {
  std::string s =
      "# Tools\n<tools>";
  for (const auto& t : tools) s += "\n" + t.dump();
  s += "\n</tools>\nTo call one, reply <tool_call>{\"name\": <function-name>, \"arguments\": <args-json-object>}</tool_call>";
  return s;
}

const char* tool_format_name(ToolFormat format) {
  switch (format) {
    case ToolFormat::kHermes: return "hermes";
    case ToolFormat::kLlama3: return "llama3";
    case ToolFormat::kMistral: return "mistral";
  }
  return "?";
}

ToolFormat tool_format_for_template(std::string_view jinja) {
  if (jinja.find("[TOOL_CALLS]") != std::string_view::npos) return ToolFormat::kMistral;
  if (jinja.find("<tool_call>") != std::string_view::npos) return ToolFormat::kHermes;
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) return ToolFormat::kLlama3;
  return ToolFormat::kHermes;
}

ChatTemplate load_chat_template(std::string_view jinja_text, const SpecialTokenText& tokens, std::string_view origin) {
  if (jinja_text.empty()) {
    TS_LOG(kWarn) << "no chat template in the model files: using the built-in ChatML format";
    return detect_chat_template(jinja_text);
  }
  auto fallback = [&](const std::string& why) {
    ChatTemplate t = detect_chat_template(jinja_text);
    TS_LOG(kWarn) << "the chat template from " << origin << " cannot be used (" << why << "): using the built-in "
                  << chat_template_name(t.kind) << " format" << (t.builtin ? "" : " it resembles");
    return t;
  };
  auto parsed = jinja::Template::parse(jinja_text);
  if (!parsed.ok()) return fallback(parsed.error().message);
  ChatTemplate t;
  t.kind = ChatTemplateKind::kJinja;
  t.builtin = false;
  t.jinja = std::make_shared<const jinja::Template>(std::move(parsed).value());
  t.bos_token = tokens.bos;
  t.eos_token = tokens.eos;
  for (const char* end : kTurnEnds) {
    if (jinja_text.find(end) != std::string_view::npos && end != t.eos_token) t.stop_pieces.emplace_back(end);
  }
  if (!t.eos_token.empty()) t.stop_pieces.push_back(t.eos_token);
  auto trial = render_jinja(t, {{"user", "Hello"}});
  if (!trial.ok()) return fallback(trial.error().message);
  t.handles_tools = jinja_text.find("tools") != std::string_view::npos;
  t.tool_format = t.handles_tools ? tool_format_for_template(jinja_text) : ToolFormat::kHermes;
  if (t.handles_tools)
    TS_LOG(kInfo) << "the chat template renders tools; tool calls are parsed in the " << tool_format_name(t.tool_format) << " format";
  else
    TS_LOG(kInfo) << "the chat template has no tool support: requests with tools get the Hermes fallback block "
                     "(docs/api.md \"Tool calls\")";
  return t;
}

const char* chat_template_name(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kChatML: return "chatml";
    case ChatTemplateKind::kLlama2: return "llama2";
    case ChatTemplateKind::kLlama3: return "llama3";
    case ChatTemplateKind::kJinja: return "jinja";
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

Result<RenderedChat> render_chat(const ChatTemplate& tmpl, const std::vector<protocol::ChatMessage>& messages_in,
                                 const ChatTools* tools) {
  if (messages_in.empty()) return make_error(ErrorCode::kInvalidArgument, "messages must not be empty");
  if (tmpl.kind == ChatTemplateKind::kJinja && tmpl.jinja && tmpl.handles_tools) return render_jinja(tmpl, messages_in, tools);
  std::vector<protocol::ChatMessage> converted;
  if (tools != nullptr) converted = with_fallback_tools(messages_in, *tools);
  const std::vector<protocol::ChatMessage>& messages = tools != nullptr ? converted : messages_in;
  if (tmpl.kind == ChatTemplateKind::kJinja && tmpl.jinja) return render_jinja(tmpl, messages);
  TS_TRY(check_roles(messages));
  switch (tmpl.kind) {
    case ChatTemplateKind::kChatML: return render_chatml(tmpl, messages);
    case ChatTemplateKind::kLlama2: return render_llama2(messages);
    case ChatTemplateKind::kLlama3: return render_llama3(messages);
    case ChatTemplateKind::kJinja: break;
  }
  return make_error(ErrorCode::kInternal, "unknown chat template kind");
}

}  // namespace tessera::frontend
