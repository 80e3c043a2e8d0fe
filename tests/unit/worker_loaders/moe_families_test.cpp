// The later mixture-of-experts families from GGUF: Qwen3 / Qwen3-MoE (`qwen3`, `qwen3moe`: per-head
// Q/K norms, renormalized top-k without a shared expert) and DeepSeek-V2 (`deepseek2`: latent
// attention, YaRN, leading dense layers, ungated shared experts, expert weight scale). Their
// keys and tensors load with llama.cpp's meaning; unsupported DeepSeek variants are refused by key.
#include <gtest/gtest.h>

#include <cmath>

#include "gguf_writer.h"
#include "loader_fixtures.h"
#include "tessera/model/model.h"
#include "tessera/model/model_synth.h"
#include "tessera/testing/paths.h"

namespace tessera {
namespace {

using MoeFamiliesTest = testing::SynthDirTest;

TEST_F(MoeFamiliesTest, Qwen3MoeReduced) {
  const auto m = synth_load("qwen3-30b-a3b-reduced");
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "qwen3moe");
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalves);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attn_bias);
  EXPECT_EQ(c.head_dim, 128);  // key_length, not dim / heads (64)
  EXPECT_EQ(c.n_experts, 16);
  EXPECT_EQ(c.n_experts_used, 8);
  EXPECT_EQ(c.expert_hidden_dim, 256);
  EXPECT_EQ(c.shared_expert_hidden_dim, 0);
  EXPECT_TRUE(c.expert_weights_norm);  // llama.cpp's build_qwen3moe: norm_w = true
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  const LayerWeights& w = m->layers[1];
  EXPECT_EQ(w.wq.rows, 4 * 128);
  EXPECT_EQ(w.wo.cols, 4 * 128);
  EXPECT_EQ(w.attn_q_norm.cols, 128);
  EXPECT_EQ(w.attn_k_norm.cols, 128);
  EXPECT_EQ(w.attn_q_norm.dtype, DType::kF32);
  EXPECT_TRUE(w.ffn_gate_shexp.empty() && w.ffn_gate_inp_shexp.empty());
  EXPECT_EQ(w.ffn_gate_exps.rows, 16 * 256);
}

TEST_F(MoeFamiliesTest, Qwen3DenseReduced) {
  const auto m = synth_load("qwen3-0.6b-reduced");
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "qwen3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.is_moe());
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(m->layers[0].attn_k_norm.cols, 128);
  EXPECT_EQ(m->layers[0].w_down.cols, 768);
}

TEST_F(MoeFamiliesTest, DeepSeekV2LiteReduced) {
  const auto m = synth_load("deepseek-v2-lite-reduced");
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "deepseek2");
  EXPECT_TRUE(c.is_mla());
  EXPECT_EQ(c.rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(c.kv_lora_rank, 256);
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_dim, 16);
  EXPECT_EQ(c.v_head_dim, 32);
  EXPECT_EQ(c.n_kv_heads, c.n_heads);
  EXPECT_EQ(c.n_dense_lead, 1);
  EXPECT_EQ(c.shared_expert_hidden_dim, 256);
  EXPECT_FALSE(c.expert_weights_norm);
  EXPECT_FLOAT_EQ(c.expert_weights_scale, 1.0f);
  EXPECT_TRUE(c.rope_yarn);
  EXPECT_EQ(c.yarn_orig_ctx, 4096);
  EXPECT_FLOAT_EQ(c.rope_freq_scale, 1.0f / 40.0f);
  const float mscale = 1.0f + 0.0707f * std::log(40.0f);
  EXPECT_FLOAT_EQ(c.attn_scale, mscale * mscale / 8.0f);  // llama.cpp's kq_scale, sqrt(64) = 8
  EXPECT_FALSE(c.layer_is_moe(0));
  EXPECT_TRUE(c.layer_is_moe(1));
  const LayerWeights& dense = m->layers[0];
  EXPECT_EQ(dense.w_gate.rows, 512);
  EXPECT_TRUE(dense.ffn_gate_exps.empty());
  const LayerWeights& w = m->layers[26];
  EXPECT_EQ(w.wq.rows, 8 * 64);
  EXPECT_TRUE(w.wk.empty() && w.wv.empty() && w.attn_q_a.empty());
  EXPECT_EQ(w.attn_kv_a_mqa.rows, 256 + 16);
  EXPECT_EQ(w.attn_kv_a_norm.cols, 256);
  EXPECT_EQ(w.attn_kv_b.rows, 8 * (48 + 32));
  EXPECT_EQ(w.wo.cols, 8 * 32);
  EXPECT_EQ(w.ffn_gate_exps.rows, 4 * 256);
  EXPECT_EQ(w.ffn_gate_shexp.rows, 256);
  EXPECT_TRUE(w.ffn_gate_inp_shexp.empty());  // DeepSeek's shared experts are not gated
}

TEST_F(MoeFamiliesTest, DeepSeekV2ReducedHasTheQLoraAndTheWeightScale) {
  const auto m = synth_load("deepseek-v2-reduced");
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.q_lora_rank, 256);
  EXPECT_FLOAT_EQ(c.expert_weights_scale, 1.5f);
  EXPECT_EQ(c.shared_expert_hidden_dim, 512);
  const LayerWeights& w = m->layers[1];
  EXPECT_TRUE(w.wq.empty());
  EXPECT_EQ(w.attn_q_a.rows, 256);
  EXPECT_EQ(w.attn_q_a_norm.cols, 256);
  EXPECT_EQ(w.attn_q_b.rows, 8 * 64);
  EXPECT_EQ(w.attn_q_b.cols, 256);
}

// A deepseek2 file with the given keys and no tensors: the keys are read before the tensors.
std::string deepseek_meta(const std::string& dir, int gating, int value_length, int groups) {
  loaders::GgufWriter w;
  const std::string a = "deepseek2.";
  w.set_string("general.architecture", "deepseek2");
  for (const auto& [k, v] : {std::pair<const char*, uint32_t>{"context_length", 128}, {"embedding_length", 64},
                             {"block_count", 2}, {"feed_forward_length", 128}, {"attention.head_count", 2},
                             {"attention.head_count_kv", 2}, {"attention.key_length", 32}, {"rope.dimension_count", 16},
                             {"attention.kv_lora_rank", 32}, {"leading_dense_block_count", 1}, {"expert_count", 4},
                             {"expert_used_count", 2}, {"expert_feed_forward_length", 32}, {"expert_shared_count", 1}}) {
    w.set_u32(a + k, v);
  }
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32(a + "attention.value_length", static_cast<uint32_t>(value_length));
  w.set_f32(a + "expert_weights_scale", 1.0f);
  w.set_u32(a + "expert_gating_func", static_cast<uint32_t>(gating));
  w.set_u32(a + "expert_group_count", static_cast<uint32_t>(groups));
  const std::string path = dir + "/ds-" + std::to_string(gating) + "-" + std::to_string(value_length) + "-" +
                           std::to_string(groups) + ".gguf";
  EXPECT_TRUE(w.write_file(path, [](size_t, std::vector<uint8_t>&) {}).ok());
  return path;
}

// DeepSeek-V3's sigmoid gating and groups are read (then the load fails on the missing
// tensors); impossible groupings, groups with softmax and unknown gating are refused by key.
TEST_F(MoeFamiliesTest, UnsupportedDeepSeekVariantsAreRefusedByKey) {
  auto fine = load_model(deepseek_meta(dir_, 1, 16, 1));  // keys accepted: fails later, on the missing tensors
  ASSERT_FALSE(fine.ok());
  EXPECT_NE(fine.error().message.find("token_embd.weight is missing"), std::string::npos) << fine.error().to_string();
  for (int groups : {1, 2}) {  // 4 experts: 1 group, or 2 groups of 2 (both kept by default)
    auto v3 = load_model(deepseek_meta(dir_, 2, 16, groups));
    ASSERT_FALSE(v3.ok());
    EXPECT_NE(v3.error().message.find("token_embd.weight is missing"), std::string::npos) << v3.error().to_string();
  }
  auto gating = load_model(deepseek_meta(dir_, 3, 16, 1));
  ASSERT_FALSE(gating.ok());
  EXPECT_EQ(gating.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(gating.error().message.find("deepseek2.expert_gating_func = 3 is not supported"), std::string::npos)
      << gating.error().to_string();
  auto groups = load_model(deepseek_meta(dir_, 2, 16, 8));
  ASSERT_FALSE(groups.ok());
  EXPECT_NE(groups.error().message.find("deepseek2.expert_group_count = 8 does not split 4 experts"), std::string::npos)
      << groups.error().to_string();
  auto softmax_groups = load_model(deepseek_meta(dir_, 1, 16, 2));
  ASSERT_FALSE(softmax_groups.ok());
  EXPECT_EQ(softmax_groups.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(softmax_groups.error().message.find("expert_group_count = 2 with softmax gating"), std::string::npos)
      << softmax_groups.error().to_string();
  auto wide_v = load_model(deepseek_meta(dir_, 1, 48, 1));
  ASSERT_FALSE(wide_v.ok());
  EXPECT_EQ(wide_v.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(wide_v.error().message.find("value_length = 48 above key_length 32"), std::string::npos) << wide_v.error().to_string();
}

}  // namespace
}  // namespace tessera
