// Gemma 2 and Phi-3 (LongRoPE) Hugging Face directories: a synthesized GGUF (checked against
// llama.cpp in llamacpp_agreement_test) is written back out as the directory transformers reads —
// HF tensor names, Gemma's norms stored as w - 1, Phi-3's fused qkv_proj / gate_up_proj, the
// LongRoPE factors as config arrays — and must load to the same model: the same fingerprint
// (the config and every weight byte) and the same family features.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
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

// GGUF tensor suffix -> HF parameter suffix, per family (the inverse of convert_hf_to_gguf.py).
std::map<std::string, std::string> layer_names(bool gemma) {
  std::map<std::string, std::string> k = {{"attn_norm.weight", "input_layernorm.weight"},
                                          {"attn_q.weight", "self_attn.q_proj.weight"},
                                          {"attn_k.weight", "self_attn.k_proj.weight"},
                                          {"attn_v.weight", "self_attn.v_proj.weight"},
                                          {"attn_qkv.weight", "self_attn.qkv_proj.weight"},
                                          {"attn_output.weight", "self_attn.o_proj.weight"},
                                          {"ffn_gate.weight", "mlp.gate_proj.weight"},
                                          {"ffn_down.weight", "mlp.down_proj.weight"}};
  if (gemma) {
    k["post_attention_norm.weight"] = "post_attention_layernorm.weight";
    k["ffn_norm.weight"] = "pre_feedforward_layernorm.weight";
    k["post_ffw_norm.weight"] = "post_feedforward_layernorm.weight";
    k["ffn_up.weight"] = "mlp.up_proj.weight";
  } else {
    k["ffn_norm.weight"] = "post_attention_layernorm.weight";
    k["ffn_up.weight"] = "mlp.gate_up_proj.weight";  // Phi-3: gate rows, then up rows
  }
  return k;
}

// The GGUF's tensors under HF names; Gemma's norms as w - 1 (exact: every w is in [0.5, 2]);
// LongRoPE's factor tensors returned in `longrope` instead (they go into config.json).
std::map<std::string, StTensor> hf_tensors(const loaders::GgufFile& g, bool gemma, std::map<std::string, std::vector<float>>* longrope) {
  const auto names = layer_names(gemma);
  std::map<std::string, StTensor> out;
  for (const loaders::GgufTensorInfo& t : g.tensors) {
    const std::string dtype = t.type == 0 ? "F32" : t.type == 1 ? "F16" : "";
    EXPECT_FALSE(dtype.empty()) << t.name;
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    if (shape.size() == 2 && shape[0] == 1) shape.erase(shape.begin());
    StTensor st{dtype, shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
    if (gemma && t.name.ends_with("norm.weight")) {
      EXPECT_EQ(dtype, "F32") << t.name;
      for (size_t i = 0; i < st.bytes.size(); i += 4) {
        float v;
        std::memcpy(&v, st.bytes.data() + i, 4);
        EXPECT_TRUE(v >= 0.5f && v <= 2.0f) << t.name;
        v -= 1.0f;
        std::memcpy(st.bytes.data() + i, &v, 4);
      }
    }
    if (t.name.rfind("rope_factors_", 0) == 0) {
      std::vector<float> f(t.nbytes / 4);
      std::memcpy(f.data(), t.data, t.nbytes);
      (*longrope)[t.name] = f;
      continue;
    }
    std::string hf;
    if (t.name == "token_embd.weight") hf = "model.embed_tokens.weight";
    if (t.name == "output_norm.weight") hf = "model.norm.weight";
    if (t.name == "output.weight") hf = "lm_head.weight";
    if (t.name.rfind("blk.", 0) == 0) {
      const size_t dot = t.name.find('.', 4);
      auto it = names.find(t.name.substr(dot + 1));
      EXPECT_NE(it, names.end()) << t.name;
      if (it != names.end()) hf = "model.layers." + t.name.substr(4, dot - 4) + "." + it->second;
    }
    EXPECT_FALSE(hf.empty()) << t.name;
    out[hf] = std::move(st);
  }
  return out;
}

json base_config(const ModelConfig& c, const std::string& type) {
  return {{"model_type", type},           {"hidden_size", c.dim},
          {"intermediate_size", c.hidden_dim}, {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads},  {"num_key_value_heads", c.n_kv_heads},
          {"head_dim", c.head_dim},            {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.max_seq_len}, {"rms_norm_eps", c.rms_eps},
          {"rope_theta", c.rope_theta},        {"tie_word_embeddings", c.tied_embeddings}};
}

class HfFamilies : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("tessera-hf-families"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Synthesizes `like`, writes it as an HF directory with config.json from `config`, loads both.
  void load_both(const std::string& like, DType dtype, bool gemma, const std::function<json(const ModelConfig&,
                                                                                            const std::map<std::string, std::vector<float>>&)>& config) {
    const std::string gguf = dir_ + "/" + like + ".gguf";
    ASSERT_TRUE(synth_model({.like = like, .dtype = dtype, .out_path = gguf, .seed = 3}).ok());
    auto g = load_model(gguf);
    ASSERT_TRUE(g.ok()) << g.error().to_string();
    gguf_ = std::move(g).value();
    auto fb = loaders::FileBytes::open(gguf, true);
    ASSERT_TRUE(fb.ok());
    auto parsed = loaders::parse_gguf(**fb);
    ASSERT_TRUE(parsed.ok());
    std::map<std::string, std::vector<float>> longrope;
    hf_dir_ = dir_ + "/" + like;
    std::filesystem::create_directories(hf_dir_);
    testutil::write_bytes(hf_dir_ + "/model.safetensors", testutil::safetensors_bytes(hf_tensors(*parsed, gemma, &longrope)));
    config_ = config(gguf_->config(), longrope);
    testutil::write_text(hf_dir_ + "/config.json", config_.dump());
    auto h = load_model(hf_dir_);
    ASSERT_TRUE(h.ok()) << h.error().to_string();
    hf_ = std::move(h).value();
  }

  Result<std::unique_ptr<Model>> load_edited(const std::function<void(json&)>& edit) {
    json j = config_;
    edit(j);
    testutil::write_text(hf_dir_ + "/config.json", j.dump());
    return load_model(hf_dir_);
  }

  void expect_same_model() const {
    const ModelConfig &a = hf_->config(), &b = gguf_->config();
    EXPECT_EQ(a.architecture, b.architecture);
    EXPECT_EQ(a.family, b.family);
    EXPECT_EQ(a.rope_layout, b.rope_layout);
    EXPECT_EQ(a.ffn_act, b.ffn_act);
    EXPECT_EQ(a.post_norms, b.post_norms);
    EXPECT_EQ(a.sliding_window, b.sliding_window);
    EXPECT_EQ(a.swa_every, b.swa_every);
    EXPECT_EQ(a.rope_freq_factors, b.rope_freq_factors);
    EXPECT_EQ(a.rope_longrope_long, b.rope_longrope_long);
    for (auto [x, y] : {std::pair{a.attn_scale, b.attn_scale}, {a.embedding_scale, b.embedding_scale},
                        {a.attn_softcap, b.attn_softcap}, {a.final_softcap, b.final_softcap},
                        {a.rope_attn_factor, b.rope_attn_factor}, {a.rms_eps, b.rms_eps}}) {
      EXPECT_EQ(x, y);
    }
    EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
    EXPECT_EQ(hf_->parameter_count(), gguf_->parameter_count());
    EXPECT_EQ(hf_->fingerprint, gguf_->fingerprint) << "config or weights differ";
  }

  std::string dir_, hf_dir_;
  json config_;
  std::unique_ptr<Model> gguf_, hf_;
};

TEST_F(HfFamilies, Gemma2LoadsAsItsGguf) {
  load_both("gemma2-2b-reduced", DType::kF16, /*gemma=*/true, [](const ModelConfig& c, const auto&) {
    json j = base_config(c, "gemma2");
    j["query_pre_attn_scalar"] = c.head_dim;  // what the GGUF loader assumes below 46 layers
    j["attn_logit_softcapping"] = c.attn_softcap;
    j["final_logit_softcapping"] = c.final_softcap;
    j["sliding_window"] = c.sliding_window;
    j["hidden_activation"] = "gelu_pytorch_tanh";
    return j;
  });
  expect_same_model();
  EXPECT_TRUE(hf_->config().post_norms);
  EXPECT_GT(hf_->config().attn_softcap, 0.0f);
  // Gemma2Config's defaults when the keys are absent; null turns them off.
  auto defaults = load_edited([](json& j) {
    for (const char* k : {"attn_logit_softcapping", "final_logit_softcapping", "sliding_window", "query_pre_attn_scalar",
                          "tie_word_embeddings"}) {
      j.erase(k);
    }
  });
  ASSERT_TRUE(defaults.ok()) << defaults.error().to_string();
  EXPECT_EQ((*defaults)->config().attn_softcap, 50.0f);
  EXPECT_EQ((*defaults)->config().final_softcap, 30.0f);
  EXPECT_EQ((*defaults)->config().sliding_window, 4096);
  EXPECT_FLOAT_EQ((*defaults)->config().attn_scale, 1.0f / 16.0f);  // 1 / sqrt(256)
  EXPECT_TRUE((*defaults)->config().tied_embeddings);
  auto off = load_edited([](json& j) {
    j["attn_logit_softcapping"] = nullptr;
    j["sliding_window"] = nullptr;
  });
  ASSERT_TRUE(off.ok()) << off.error().to_string();
  EXPECT_EQ((*off)->config().attn_softcap, 0.0f);
  EXPECT_EQ((*off)->config().sliding_window, 0);
  auto silu = load_edited([](json& j) { j["hidden_activation"] = "silu"; });
  ASSERT_FALSE(silu.ok());
  EXPECT_EQ(silu.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(silu.error().message.find("hidden_activation 'silu'"), std::string::npos) << silu.error().message;
}

TEST_F(HfFamilies, Phi3LongRopeLoadsAsItsGguf) {
  load_both("phi3-mini-128k-reduced", DType::kF32, /*gemma=*/false, [](const ModelConfig& c, const auto& longrope) {
    json j = base_config(c, "phi3");
    j["sliding_window"] = c.sliding_window;
    j["original_max_position_embeddings"] = 128;
    j["rope_scaling"] = {{"type", "longrope"},
                         {"long_factor", longrope.at("rope_factors_long.weight")},
                         {"short_factor", longrope.at("rope_factors_short.weight")}};
    return j;
  });
  expect_same_model();
  EXPECT_TRUE(hf_->config().rope_longrope_long);
  EXPECT_EQ(hf_->layers[0].wk.data, static_cast<const uint8_t*>(hf_->layers[0].wq.data) +
                                        hf_->layers[0].wq.rows * dtype_row_bytes(hf_->layers[0].wq.dtype, hf_->layers[0].wq.cols))
      << "qkv_proj: row views of one tensor";
  // A context within the original one takes the short factors, without the attention factor.
  auto short_ctx = load_edited([](json& j) { j["max_position_embeddings"] = 128; });
  ASSERT_TRUE(short_ctx.ok()) << short_ctx.error().to_string();
  EXPECT_FALSE((*short_ctx)->config().rope_longrope_long);
  EXPECT_FLOAT_EQ((*short_ctx)->config().rope_freq_factors.back(), 3.0f);
  EXPECT_EQ((*short_ctx)->config().rope_attn_factor, 1.0f);
  auto bad = load_edited([](json& j) { j["rope_scaling"]["long_factor"] = json::array({1.0, 2.0}); });
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kCorruptFile);
  EXPECT_NE(bad.error().message.find("long_factor must be an array of head_dim / 2 = 32"), std::string::npos)
      << bad.error().message;
  auto one = load_edited([](json& j) { j["original_max_position_embeddings"] = 1; });  // ln(1) = 0: an infinite factor
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.error().message.find("original_max_position_embeddings must be at least 2"), std::string::npos)
      << one.error().message;
  auto small = load_edited([](json& j) { j["rope_scaling"]["long_mscale"] = 1.2; });
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.error().code, ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace tessera::worker
