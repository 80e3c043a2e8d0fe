// Mixture-of-experts Hugging Face directories (Mixtral, Qwen2-MoE, Qwen3-MoE): config.json's
// expert settings map as the GGUF converter maps them, each layer's per-expert matrices are
// stacked into one tensor whose expert_matrix(e) is expert e's bytes, and a missing expert is
// refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "safetensors_writer.h"
#include "tessera/model/model.h"
#include "tessera/testing/paths.h"

namespace tessera {
namespace {

using worker::testutil::StTensor;

constexpr int64_t kDim = 32, kFf = 16, kExperts = 4, kVocab = 64, kHeads = 2, kHeadDim = 16;

// A matrix whose values encode (tensor tag, row, col), so that every element can be checked.
StTensor mat(int64_t rows, int64_t cols, float tag) {
  StTensor t{.dtype = "F32", .shape = {rows, cols}, .bytes = std::vector<uint8_t>(static_cast<size_t>(rows * cols * 4))};
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v = tag + static_cast<float>(i) * 1e-4f;
    std::memcpy(t.bytes.data() + i * 4, &v, 4);
  }
  return t;
}

std::map<std::string, StTensor> moe_tensors(const std::string& type, bool drop_one_expert) {
  std::map<std::string, StTensor> t;
  t["model.embed_tokens.weight"] = mat(kVocab, kDim, 1);
  t["model.norm.weight"] = mat(1, kDim, 2);
  t["lm_head.weight"] = mat(kVocab, kDim, 3);
  const bool mixtral = type == "mixtral";
  const std::string moe = mixtral ? "block_sparse_moe." : "mlp.";
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t[p + "input_layernorm.weight"] = mat(1, kDim, 4);
    t[p + "post_attention_layernorm.weight"] = mat(1, kDim, 5);
    t[p + "self_attn.q_proj.weight"] = mat(kHeads * kHeadDim, kDim, 6);
    t[p + "self_attn.k_proj.weight"] = mat(kHeads * kHeadDim, kDim, 7);
    t[p + "self_attn.v_proj.weight"] = mat(kHeads * kHeadDim, kDim, 8);
    t[p + "self_attn.o_proj.weight"] = mat(kDim, kHeads * kHeadDim, 9);
    if (type == "qwen3_moe") {
      t[p + "self_attn.q_norm.weight"] = mat(1, kHeadDim, 10);
      t[p + "self_attn.k_norm.weight"] = mat(1, kHeadDim, 11);
    }
    t[p + moe + "gate.weight"] = mat(kExperts, kDim, 12);
    for (int e = 0; e < kExperts; ++e) {
      if (drop_one_expert && l == 1 && e == 2) continue;
      const std::string x = p + moe + "experts." + std::to_string(e) + ".";
      const float tag = 100.0f * static_cast<float>(l + 1) + 10.0f * static_cast<float>(e);
      t[x + (mixtral ? "w1" : "gate_proj") + ".weight"] = mat(kFf, kDim, tag + 1);
      t[x + (mixtral ? "w3" : "up_proj") + ".weight"] = mat(kFf, kDim, tag + 2);
      t[x + (mixtral ? "w2" : "down_proj") + ".weight"] = mat(kDim, kFf, tag + 3);
    }
    if (type == "qwen2_moe") {
      t[p + "mlp.shared_expert.gate_proj.weight"] = mat(2 * kFf, kDim, 13);
      t[p + "mlp.shared_expert.up_proj.weight"] = mat(2 * kFf, kDim, 14);
      t[p + "mlp.shared_expert.down_proj.weight"] = mat(kDim, 2 * kFf, 15);
      t[p + "mlp.shared_expert_gate.weight"] = mat(1, kDim, 16);
    }
  }
  return t;
}

std::string write_dir(const std::string& root, const std::string& type, bool drop_one_expert = false) {
  const std::string dir = root + "/" + type + (drop_one_expert ? "-missing" : "");
  std::filesystem::create_directories(dir);
  nlohmann::json c = {{"model_type", type}, {"hidden_size", kDim}, {"intermediate_size", kFf}, {"num_hidden_layers", 2},
                      {"num_attention_heads", kHeads}, {"num_key_value_heads", kHeads}, {"head_dim", kHeadDim},
                      {"vocab_size", kVocab}, {"max_position_embeddings", 128}, {"num_experts_per_tok", 2}};
  if (type == "mixtral") {
    c["num_local_experts"] = kExperts;
  } else {
    c["num_experts"] = kExperts;
    c["moe_intermediate_size"] = kFf;
  }
  if (type == "qwen2_moe") {
    c["shared_expert_intermediate_size"] = 2 * kFf;
    c["norm_topk_prob"] = false;
  }
  worker::testutil::write_text(dir + "/config.json", c.dump());
  worker::testutil::write_bytes(dir + "/model.safetensors", worker::testutil::safetensors_bytes(moe_tensors(type, drop_one_expert)));
  return dir;
}

class HfMoe : public ::testing::TestWithParam<const char*> {};

TEST_P(HfMoe, ExpertsAreStackedInOrder) {
  const std::string type = GetParam();
  const std::string root = testing::make_temp_dir("hf-moe");
  auto r = load_model(write_dir(root, type));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  const Model& m = **r;
  const ModelConfig& c = m.config();
  EXPECT_EQ(c.architecture, type == "mixtral" ? "llama" : type == "qwen2_moe" ? "qwen2moe" : "qwen3moe");
  EXPECT_EQ(c.n_experts, kExperts);
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.expert_hidden_dim, kFf);
  EXPECT_EQ(c.expert_weights_norm, type != "qwen2_moe");  // Mixtral; Qwen3-MoE's norm_topk_prob default
  EXPECT_EQ(c.shared_expert_hidden_dim, type == "qwen2_moe" ? 2 * kFf : 0);
  EXPECT_EQ(c.qk_norm, type == "qwen3_moe");
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalves);
  const std::map<std::string, StTensor> src = moe_tensors(type, false);
  const bool mixtral = type == "mixtral";
  for (int l = 0; l < 2; ++l) {
    const LayerWeights& w = m.layers[static_cast<size_t>(l)];
    ASSERT_EQ(w.ffn_down_exps.rows, kExperts * kDim);
    for (int e = 0; e < kExperts; ++e) {
      const std::string x = "model.layers." + std::to_string(l) + "." + (mixtral ? "block_sparse_moe." : "mlp.") + "experts." +
                            std::to_string(e) + ".";
      for (const auto& [stacked, hf] : {std::pair{&w.ffn_gate_exps, mixtral ? "w1" : "gate_proj"},
                                        std::pair{&w.ffn_up_exps, mixtral ? "w3" : "up_proj"},
                                        std::pair{&w.ffn_down_exps, mixtral ? "w2" : "down_proj"}}) {
        const Tensor got = expert_matrix(*stacked, kExperts, e);
        const StTensor& want = src.at(x + hf + ".weight");
        ASSERT_EQ(got.rows * got.cols * 4, static_cast<int64_t>(want.bytes.size())) << x << hf;
        EXPECT_EQ(std::memcmp(got.data, want.bytes.data(), want.bytes.size()), 0) << x << hf;
      }
    }
    EXPECT_EQ(w.ffn_gate_inp.rows, kExperts);
    if (type == "qwen3_moe") {
      EXPECT_EQ(w.attn_q_norm.cols, kHeadDim);
    }
    if (type == "qwen2_moe") {
      EXPECT_EQ(w.ffn_gate_inp_shexp.cols, kDim);
    }
  }
  auto missing = load_model(write_dir(root, type, /*drop_one_expert=*/true));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("expert 2 of layer 1 (ffn_gate_exps) is missing"), std::string::npos)
      << missing.error().to_string();
  std::filesystem::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Types, HfMoe, ::testing::Values("mixtral", "qwen2_moe", "qwen3_moe"));

}  // namespace
}  // namespace tessera
