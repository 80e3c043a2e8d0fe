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

}  // namespace
}  // namespace tessera::frontend
