// DeepSeek-V2 / V2-Lite / V3 Hugging Face directories: a synthesized deepseek2 GGUF (checked
// against llama.cpp in llamacpp_agreement_test) is written back out as the directory
// modeling_deepseek.py reads — each tensor under its HF name, experts one matrix each,
// config.json with DeepSeek's keys — and must load to the same model: every config field the
// forward pass reads, and the same fingerprint (which hashes the config and every weight byte).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "file_bytes.h"
#include "gguf.h"
#include "safetensors_writer.h"
#include "tessera/model/model.h"
#include "tessera/model/model_synth.h"
#include "tessera/testing/paths.h"

namespace tessera::worker {
namespace {

using nlohmann::json;
using testutil::StTensor;

// GGUF tensor suffix -> HF parameter suffix (the inverse of convert_hf_to_gguf.py's map).
const std::map<std::string, std::string>& hf_names() {
  static const std::map<std::string, std::string> k = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
      {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
      {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
      {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
      {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
      {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate_inp.weight", "mlp.gate.weight"},
      {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
      {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"}};
  return k;
}

// The GGUF's tensors under their HF names (F32 or F16, as stored); stacked experts split.
std::map<std::string, StTensor> hf_tensors(const loaders::GgufFile& g) {
  std::map<std::string, StTensor> out;
  for (const loaders::GgufTensorInfo& t : g.tensors) {
    const std::string dtype = t.type == 0 ? "F32" : t.type == 1 ? "F16" : "";
    EXPECT_FALSE(dtype.empty()) << t.name;
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    auto put = [&](const std::string& name, std::vector<int64_t> s, const uint8_t* data, size_t n) {
      out[name] = StTensor{dtype, std::move(s), std::vector<uint8_t>(data, data + n)};
    };
    if (t.name == "token_embd.weight") {
      put("model.embed_tokens.weight", shape, t.data, t.nbytes);
      continue;
    }
    if (t.name == "output_norm.weight") {
      put("model.norm.weight", shape, t.data, t.nbytes);
      continue;
    }
    if (t.name == "output.weight") {
      put("lm_head.weight", shape, t.data, t.nbytes);
      continue;
    }
    EXPECT_EQ(t.name.rfind("blk.", 0), 0u) << t.name;
    const size_t dot = t.name.find('.', 4);
    const std::string layer = t.name.substr(4, dot - 4), rest = t.name.substr(dot + 1);
    const std::string p = "model.layers." + layer + ".";
    if (rest.find("_exps.weight") != std::string::npos) {
      const std::string proj = rest.substr(4, rest.find('_', 4) - 4);  // gate, up, down
      const int64_t experts = shape[0];
      const size_t each = t.nbytes / static_cast<size_t>(experts);
      for (int64_t e = 0; e < experts; ++e) {
        put(p + "mlp.experts." + std::to_string(e) + "." + proj + "_proj.weight", {shape[1], shape[2]},
            t.data + static_cast<size_t>(e) * each, each);
      }
      continue;
    }
    auto it = hf_names().find(rest);
    EXPECT_NE(it, hf_names().end()) << t.name;
    if (it != hf_names().end()) put(p + it->second, shape, t.data, t.nbytes);
  }
  return out;
}

// config.json as DeepSeek ships it, for the GGUF's configuration.
json hf_config(const ModelConfig& c, bool v3) {
  json j = {{"model_type", v3 ? "deepseek_v3" : "deepseek_v2"},
            {"hidden_size", c.dim},
            {"intermediate_size", c.hidden_dim},
            {"moe_intermediate_size", c.expert_hidden_dim},
            {"num_hidden_layers", c.n_layers},
            {"num_attention_heads", c.n_heads},
            {"num_key_value_heads", c.n_heads},
            {"vocab_size", c.vocab_size},
            {"max_position_embeddings", c.max_seq_len},
            {"rms_norm_eps", c.rms_eps},
            {"rope_theta", c.rope_theta},
            {"tie_word_embeddings", false},
            {"kv_lora_rank", c.kv_lora_rank},
            {"q_lora_rank", c.q_lora_rank > 0 ? json(c.q_lora_rank) : json(nullptr)},
            {"qk_nope_head_dim", c.head_dim - c.rope_dim},
            {"qk_rope_head_dim", c.rope_dim},
            {"v_head_dim", c.v_head_dim},
            {"n_routed_experts", c.n_experts},
            {"num_experts_per_tok", c.n_experts_used},
            {"n_shared_experts", c.shared_expert_hidden_dim / c.expert_hidden_dim},
            {"first_k_dense_replace", c.n_dense_lead},
            {"moe_layer_freq", 1},
            {"norm_topk_prob", c.expert_weights_norm},
            {"routed_scaling_factor", c.expert_weights_scale},
            {"scoring_func", v3 ? "sigmoid" : "softmax"},
            {"topk_method", v3 ? "noaux_tc" : "greedy"},
            {"n_group", c.n_expert_groups},
            {"topk_group", c.n_expert_groups_used}};
  // yarn_log_multiplier = 0.1 * mscale_all_dim (the converter); 0.0707 -> 0.707, 0.1 -> 1.
  const double m = std::round(static_cast<double>(c.yarn_log_mul) * 10000.0) / 1000.0;
  j["rope_scaling"] = {{"type", "yarn"},      {"factor", 1.0 / c.rope_freq_scale},
                       {"original_max_position_embeddings", c.yarn_orig_ctx},
                       {"beta_fast", 32},     {"beta_slow", 1},
                       {"mscale", m},         {"mscale_all_dim", m}};
  return j;
}

class HfDeepSeek : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("tessera-hf-deepseek"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Synthesizes `like`, writes it as an HF directory (config edited by `edit`), loads both.
  void load_both(const std::string& like, DType dtype, bool v3) {
    const std::string gguf = dir_ + "/" + like + ".gguf";
    ASSERT_TRUE(synth_model({.like = like, .dtype = dtype, .out_path = gguf, .seed = 7}).ok());
    auto g = load_model(gguf);
    ASSERT_TRUE(g.ok()) << g.error().to_string();
    gguf_ = std::move(g).value();
    auto fb = loaders::FileBytes::open(gguf, true);
    ASSERT_TRUE(fb.ok());
    auto parsed = loaders::parse_gguf(**fb);
    ASSERT_TRUE(parsed.ok());
    hf_dir_ = dir_ + "/" + like;
    std::filesystem::create_directories(hf_dir_);
    auto tensors = hf_tensors(*parsed);
    if (v3) {
      // DeepSeek-V3 ships its multi-token-prediction layer as layer num_hidden_layers: skipped,
      // as convert_hf_to_gguf.py skips it (shapes here deliberately wrong for a decoder layer).
      const std::string mtp = "model.layers." + std::to_string(gguf_->config().n_layers) + ".";
      for (const char* name : {"self_attn.q_a_proj.weight", "input_layernorm.weight", "eh_proj.weight", "embed_tokens.weight"}) {
        tensors[mtp + name] = StTensor{"F32", {2, 2}, std::vector<uint8_t>(16, 0)};
      }
    }
    testutil::write_bytes(hf_dir_ + "/model.safetensors", testutil::safetensors_bytes(tensors));
    config_ = hf_config(gguf_->config(), v3);
    testutil::write_text(hf_dir_ + "/config.json", config_.dump(2));
    auto h = load_model(hf_dir_);
    ASSERT_TRUE(h.ok()) << h.error().to_string();
    hf_ = std::move(h).value();
  }

  // Loads the directory with one config.json key changed.
  Result<std::unique_ptr<Model>> load_with(const std::string& key, const json& value) {
    json j = config_;
    if (key.rfind("rope_scaling.", 0) == 0) {
      j["rope_scaling"][key.substr(13)] = value;
    } else {
      j[key] = value;
    }
    testutil::write_text(hf_dir_ + "/config.json", j.dump());
    return load_model(hf_dir_);
  }

  void expect_same_model() const {
    const ModelConfig &a = hf_->config(), &b = gguf_->config();
    EXPECT_EQ(a.architecture, "deepseek2");
    EXPECT_EQ(a.family, "deepseek2");
    EXPECT_EQ(a.rope_layout, RopeLayout::kInterleaved);
    for (auto [x, y] : {std::pair{a.dim, b.dim}, {a.hidden_dim, b.hidden_dim}, {a.n_layers, b.n_layers},
                        {a.n_heads, b.n_heads}, {a.n_kv_heads, b.n_kv_heads}, {a.head_dim, b.head_dim},
                        {a.vocab_size, b.vocab_size}, {a.kv_lora_rank, b.kv_lora_rank}, {a.q_lora_rank, b.q_lora_rank},
                        {a.rope_dim, b.rope_dim}, {a.v_head_dim, b.v_head_dim}, {a.n_dense_lead, b.n_dense_lead},
                        {a.n_experts, b.n_experts}, {a.n_experts_used, b.n_experts_used},
                        {a.expert_hidden_dim, b.expert_hidden_dim}, {a.shared_expert_hidden_dim, b.shared_expert_hidden_dim},
                        {a.n_expert_groups, b.n_expert_groups}, {a.n_expert_groups_used, b.n_expert_groups_used},
                        {a.yarn_orig_ctx, b.yarn_orig_ctx}, {a.max_seq_len, b.max_seq_len}}) {
      EXPECT_EQ(x, y);
    }
    for (auto [x, y] : {std::pair{a.rms_eps, b.rms_eps}, {a.rope_theta, b.rope_theta}, {a.rope_freq_scale, b.rope_freq_scale},
                        {a.yarn_log_mul, b.yarn_log_mul}, {a.attn_scale, b.attn_scale},
                        {a.expert_weights_scale, b.expert_weights_scale}}) {
      EXPECT_EQ(x, y);
    }
    EXPECT_EQ(a.rope_yarn, b.rope_yarn);
    EXPECT_TRUE(a.rope_yarn);
    EXPECT_EQ(a.expert_sigmoid, b.expert_sigmoid);
    EXPECT_EQ(a.expert_weights_norm, b.expert_weights_norm);
    EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
    EXPECT_EQ(hf_->parameter_count(), gguf_->parameter_count());
    EXPECT_EQ(hf_->fingerprint, gguf_->fingerprint) << "config or weights differ";
  }

  std::string dir_, hf_dir_;
  json config_;
  std::unique_ptr<Model> gguf_, hf_;
};

TEST_F(HfDeepSeek, V2WithQueryLoraLoadsAsItsGguf) {
  load_both("deepseek-v2-reduced", DType::kF32, false);
  expect_same_model();
  EXPECT_GT(hf_->config().q_lora_rank, 0);
  EXPECT_FLOAT_EQ(hf_->config().expert_weights_scale, 1.5f);
}

TEST_F(HfDeepSeek, V2LiteLoadsAsItsGguf) {
  // 27 layers (llama.cpp's Lite path), no q LoRA: a plain q_proj; F16 keeps the file small.
  load_both("deepseek-v2-lite-reduced", DType::kF16, false);
  expect_same_model();
  EXPECT_EQ(hf_->config().q_lora_rank, 0);
  EXPECT_EQ(hf_->config().n_dense_lead, 1);
  EXPECT_TRUE(hf_->layers[0].ffn_gate_exps.empty()) << "the leading dense layer has no experts";
}

TEST_F(HfDeepSeek, V3SigmoidBiasAndGroupsLoadAsItsGguf) {
  load_both("deepseek-v3-grouped-reduced", DType::kF32, true);
  expect_same_model();
  EXPECT_TRUE(hf_->config().expert_sigmoid);
  EXPECT_EQ(hf_->config().n_expert_groups, 4);
  EXPECT_FALSE(hf_->layers[1].ffn_exp_probs_b.empty());
}

TEST_F(HfDeepSeek, UnsupportedAndWrongKeysAreNamed) {
  load_both("deepseek-v2-reduced", DType::kF32, false);
  struct Case {
    std::string key;
    json value;
    ErrorCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"rope_scaling.mscale", 1.0, ErrorCode::kUnsupported, "mscale_all_dim"},
      {"rope_scaling.beta_fast", 16, ErrorCode::kUnsupported, "beta_fast"},
      {"rope_scaling.factor", 0.5, ErrorCode::kCorruptFile, "factor >= 1"},
      {"scoring_func", "relu", ErrorCode::kUnsupported, "scoring_func 'relu'"},
      {"topk_method", "random", ErrorCode::kUnsupported, "topk_method 'random'"},
      {"moe_layer_freq", 2, ErrorCode::kUnsupported, "moe_layer_freq 2"},
      {"v_head_dim", 96, ErrorCode::kUnsupported, "v_head_dim 96"},
      {"qk_rope_head_dim", 15, ErrorCode::kCorruptFile, "qk_rope_head_dim"},
      {"kv_lora_rank", nullptr, ErrorCode::kCorruptFile, "kv_lora_rank is missing"},
      {"first_k_dense_replace", 3, ErrorCode::kCorruptFile, "first_k_dense_replace"},
      {"rope_scaling.type", "llama3", ErrorCode::kUnsupported, "RoPE frequency factors or a RoPE attention factor with multi-head"},
  };
  for (const Case& k : cases) {
    auto r = load_with(k.key, k.value);
    ASSERT_FALSE(r.ok()) << k.key;
    EXPECT_EQ(r.error().code, k.code) << k.key << ": " << r.error().message;
    EXPECT_NE(r.error().message.find(k.message), std::string::npos) << k.key << ": " << r.error().message;
  }
  // group_limited_greedy with softmax scores and several groups (DeepSeek-V2 full size): refused
  // as the GGUF loader refuses it; groups that do not split the experts: named.
  json j = config_;
  j["topk_method"] = "group_limited_greedy";
  j["n_group"] = 4;
  j["topk_group"] = 2;
  testutil::write_text(hf_dir_ + "/config.json", j.dump());
  auto grouped = load_model(hf_dir_);
  ASSERT_FALSE(grouped.ok());
  EXPECT_EQ(grouped.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(grouped.error().message.find("softmax"), std::string::npos) << grouped.error().message;
  j["scoring_func"] = "sigmoid";
  j["topk_method"] = "noaux_tc";
  j["n_group"] = 3;
  testutil::write_text(hf_dir_ + "/config.json", j.dump());
  auto uneven = load_model(hf_dir_);
  ASSERT_FALSE(uneven.ok());
  EXPECT_EQ(uneven.error().code, ErrorCode::kCorruptFile);
  EXPECT_NE(uneven.error().message.find("n_group 3 does not split 8 experts"), std::string::npos) << uneven.error().message;
}

}  // namespace
}  // namespace tessera::worker
