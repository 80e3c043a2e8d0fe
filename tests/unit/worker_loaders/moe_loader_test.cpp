// Mixture-of-experts GGUF files: Mixtral (`llama` + expert keys) and Qwen2-MoE (`qwen2moe`) load
// with llama.cpp's keys and defaults, stacked expert tensors become [n_experts * rows, cols]
// Tensors whose expert_matrix() views are each expert's rows; malformed expert metadata or
// tensors are refused naming the key or tensor; synth's mixes follow llama.cpp's 8-expert rules.
#include <gtest/gtest.h>

#include "gguf_writer.h"
#include "synth.h"
#include "loader_fixtures.h"
#include "tessera/model/model.h"
#include "tessera/model/model_synth.h"
#include "tessera/testing/paths.h"

namespace tessera {
namespace {

using MoeLoaderTest = testing::SynthDirTest;

TEST_F(MoeLoaderTest, MixtralReduced) {
  const auto m = synth_load("mixtral-8x7b-reduced");
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.family, "mixtral");
  EXPECT_TRUE(c.is_moe());
  EXPECT_EQ(c.n_experts, 8);
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.expert_hidden_dim, 512);  // feed_forward_length, as llama.cpp's llama graph
  EXPECT_EQ(c.shared_expert_hidden_dim, 0);
  EXPECT_TRUE(c.expert_weights_norm);
  const LayerWeights& w = m->layers[1];
  EXPECT_TRUE(w.w_gate.empty() && w.w_up.empty() && w.w_down.empty());
  EXPECT_EQ(w.ffn_gate_inp.rows, 8);
  EXPECT_EQ(w.ffn_gate_inp.dtype, DType::kF32);
  EXPECT_EQ(w.ffn_gate_exps.rows, 8 * 512);
  EXPECT_EQ(w.ffn_down_exps.rows, 8 * 256);
  EXPECT_EQ(w.ffn_down_exps.cols, 512);
  EXPECT_TRUE(w.ffn_gate_shexp.empty());
  // Expert 5's rows are the values synth wrote for rows 5 * 512 .. of the stacked tensor.
  const Tensor e5 = expert_matrix(w.ffn_up_exps, 8, 5);
  EXPECT_EQ(e5.rows, 512);
  std::vector<float> want(static_cast<size_t>(8 * 512 * 256));
  loaders::synth_values(0, "blk.1.ffn_up_exps.weight", 0, want.size(), want.data(), 0.08f);
  EXPECT_EQ(e5.f32()[0], want[5 * 512 * 256]);
  EXPECT_EQ(e5.f32()[511 * 256 + 255], want[6 * 512 * 256 - 1]);
  EXPECT_EQ(m->parameter_count(), 7214336);
}

TEST_F(MoeLoaderTest, Qwen2MoeReduced) {
  const auto m = synth_load("qwen2-moe-a2.7b-reduced");
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "qwen2moe");
  EXPECT_EQ(c.family, "qwen2moe");
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalves);
  EXPECT_TRUE(c.attn_bias);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_EQ(c.n_experts, 16);
  EXPECT_EQ(c.n_experts_used, 4);
  EXPECT_EQ(c.expert_hidden_dim, 256);
  EXPECT_EQ(c.shared_expert_hidden_dim, 512);
  EXPECT_FALSE(c.expert_weights_norm);  // llama.cpp's qwen2moe graph: no renormalization
  const LayerWeights& w = m->layers[0];
  EXPECT_EQ(w.ffn_gate_inp_shexp.rows, 1);
  EXPECT_EQ(w.ffn_gate_inp_shexp.cols, 256);
  EXPECT_EQ(w.ffn_gate_shexp.rows, 512);
  EXPECT_EQ(w.ffn_down_shexp.cols, 512);
}

TEST_F(MoeLoaderTest, MixesFollowTheEightExpertRules) {
  const auto shape = synth_shape("mixtral-8x7b-reduced");
  ASSERT_TRUE(shape.ok());
  SynthOptions o;
  ASSERT_TRUE(parse_synth_dtype("q4_k_m", &o).ok());
  EXPECT_EQ(synth_tensor_type(o, *shape, "blk.0.attn_v.weight", 256), DType::kQ8_0);
  EXPECT_EQ(synth_tensor_type(o, *shape, "blk.1.attn_k.weight", 256), DType::kQ8_0);
  EXPECT_EQ(synth_tensor_type(o, *shape, "blk.1.attn_output.weight", 256), DType::kQ5_K);
  EXPECT_EQ(synth_tensor_type(o, *shape, "blk.1.ffn_down_exps.weight", 512), DType::kQ6_K);  // a more-bits layer
  EXPECT_EQ(synth_tensor_type(o, *shape, "blk.0.ffn_down_exps.weight", 512), DType::kQ4_K);
  EXPECT_EQ(synth_tensor_type(o, *shape, "blk.0.ffn_up_exps.weight", 256), DType::kQ4_K);
  const auto m = synth_load("qwen2-moe-a2.7b-reduced", "q4_k_m");
  ASSERT_TRUE(m);
  const LayerWeights& w = m->layers[1];  // of 2 layers, llama.cpp's use_more_bits picks layer 1
  EXPECT_EQ(w.ffn_gate_inp.dtype, DType::kF32);  // llama-quantize never quantizes the router
  EXPECT_EQ(w.ffn_gate_exps.dtype, DType::kQ4_K);
  EXPECT_EQ(w.ffn_down_exps.dtype, DType::kQ6_K);
  EXPECT_EQ(m->layers[0].ffn_down_exps.dtype, DType::kQ4_K);
  EXPECT_EQ(w.ffn_down_shexp.dtype, DType::kQ6_K);
  EXPECT_EQ(w.wv.dtype, DType::kQ6_K);  // 16 experts: the dense rules
}

// A one-layer Mixtral-style file with the given expert keys and expert tensor shapes.
std::string tiny_moe(const std::string& dir, int experts, int used, bool with_down, uint64_t gate_experts) {
  loaders::GgufWriter w = testing::tiny_llama_writer();
  w.set_u32("llama.expert_count", static_cast<uint32_t>(experts));
  w.set_u32("llama.expert_used_count", static_cast<uint32_t>(used));
  w.add_tensor("blk.0.ffn_gate_inp.weight", 0, {32, static_cast<uint64_t>(experts)});
  w.add_tensor("blk.0.ffn_gate_exps.weight", 0, {32, 32, gate_experts});
  w.add_tensor("blk.0.ffn_up_exps.weight", 0, {32, 32, static_cast<uint64_t>(experts)});
  if (with_down) w.add_tensor("blk.0.ffn_down_exps.weight", 0, {32, 32, static_cast<uint64_t>(experts)});
  return testing::write_zeros(w, dir + "/tiny-moe.gguf");
}

TEST_F(MoeLoaderTest, MalformedExpertsAreRefusedByName) {
  ASSERT_TRUE(load_model(tiny_moe(dir_, 4, 2, true, 4)).ok());
  auto used = load_model(tiny_moe(dir_, 4, 5, true, 4));
  ASSERT_FALSE(used.ok());
  EXPECT_EQ(used.error().code, ErrorCode::kCorruptFile);
  EXPECT_NE(used.error().message.find("llama.expert_used_count = 5"), std::string::npos) << used.error().to_string();
  auto missing = load_model(tiny_moe(dir_, 4, 2, false, 4));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("missing tensor blk.0.ffn_down_exps.weight"), std::string::npos)
      << missing.error().to_string();
  auto shape = load_model(tiny_moe(dir_, 4, 2, true, 3));
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.error().message.find("blk.0.ffn_gate_exps.weight has shape [3, 32, 32], expected [4, 32, 32]"),
            std::string::npos)
      << shape.error().to_string();
}

}  // namespace
}  // namespace tessera
