// Model families in the GGUF loader: each `model synth --like <family>-reduced` file loads with
// the family's features (the values synth wrote, llama.cpp's defaults otherwise); Phi-3's fused
// tensors become row views; unsupported RoPE scaling is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "gguf_writer.h"
#include "synth.h"
#include "loader_fixtures.h"
#include "tessera/model/model.h"
#include "tessera/model/model_synth.h"
#include "tessera/testing/paths.h"

namespace tessera {
namespace {

using FamilyTest = testing::SynthDirTest;

TEST_F(FamilyTest, Llama3RopeFreqs) {
  const auto m = synth_load("llama3.2-1b-reduced");
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.family, "llama3");
  EXPECT_EQ(c.rope_layout, RopeLayout::kInterleaved);
  ASSERT_EQ(c.rope_freq_factors.size(), 32u);
  // Factor 32 for the lowest frequencies, 1 for the highest, as convert_hf_to_gguf.py computes.
  EXPECT_FLOAT_EQ(c.rope_freq_factors.front(), 1.0f);
  EXPECT_FLOAT_EQ(c.rope_freq_factors.back(), 32.0f);
  EXPECT_EQ(loaders::llama3_rope_factors(500000.0f, 64, 32.0f), c.rope_freq_factors);
  EXPECT_EQ(c.sliding_window, 0);
}

TEST_F(FamilyTest, Gemma2Features) {
  const auto m = synth_load("gemma2-2b-reduced");
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.family, "gemma2");
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalves);
  EXPECT_EQ(c.head_dim, 128);  // key_length, not dim / heads = 64
  EXPECT_FLOAT_EQ(c.embedding_scale, 16.0f);
  EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / std::sqrt(128.0f));
  EXPECT_FLOAT_EQ(c.attn_softcap, 1.0f);
  EXPECT_FLOAT_EQ(c.final_softcap, 3.0f);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_TRUE(c.layer_uses_swa(0));
  EXPECT_FALSE(c.layer_uses_swa(1));
  EXPECT_TRUE(c.post_norms);
  EXPECT_EQ(c.ffn_act, FfnActivation::kGeluTanh);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(m->layers[25].attn_post_norm.empty());
  EXPECT_FALSE(m->layers[25].ffn_post_norm.empty());
}

TEST_F(FamilyTest, Phi3FusedTensorsAreRowViews) {
  const auto m = synth_load("phi3-mini-reduced");
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.family, "phi3");
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_TRUE(c.layer_uses_swa(1));
  EXPECT_FALSE(c.tied_embeddings);
  const LayerWeights& w = m->layers[0];
  const size_t row = dtype_row_bytes(DType::kF32, c.dim);
  EXPECT_EQ(w.wq.rows, 256);
  EXPECT_EQ(w.wk.data, static_cast<const uint8_t*>(w.wq.data) + 256 * row);
  EXPECT_EQ(w.wv.data, static_cast<const uint8_t*>(w.wk.data) + 256 * row);
  EXPECT_EQ(w.w_gate.rows, c.hidden_dim);
  EXPECT_EQ(w.w_up.data, static_cast<const uint8_t*>(w.w_gate.data) + static_cast<size_t>(c.hidden_dim) * row);
  // The values are the fused tensor's rows: ffn_up's row hidden_dim is w_up's row 0.
  std::vector<float> fused(static_cast<size_t>(2 * c.hidden_dim * c.dim));
  loaders::synth_values(0, "blk.0.ffn_up.weight", 0, fused.size(), fused.data(), 0.08f);
  EXPECT_EQ(w.w_up.f32()[0], fused[static_cast<size_t>(c.hidden_dim) * static_cast<size_t>(c.dim)]);
}

TEST_F(FamilyTest, Qwen25AndMistralAndSmol) {
  const auto q = synth_load("qwen2.5-0.5b-reduced");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->config().family, "qwen2.5");
  EXPECT_TRUE(q->config().attn_bias);
  EXPECT_EQ(q->config().rope_layout, RopeLayout::kHalves);
  const auto mi = synth_load("mistral-7b-reduced");
  ASSERT_TRUE(mi);
  EXPECT_EQ(mi->config().family, "mistral");
  EXPECT_EQ(mi->config().architecture, "llama");
  EXPECT_EQ(mi->config().n_heads / mi->config().n_kv_heads, 4);
  const auto s = synth_load("smollm2-135m-reduced");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->config().family, "smollm2");
  EXPECT_TRUE(s->config().tied_embeddings);
}

TEST_F(FamilyTest, Phi3LongRopeTakesTheLongFactorsForTheWholeContext) {
  const auto m = synth_load("phi3-mini-128k-reduced");
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "phi3");
  EXPECT_TRUE(c.rope_longrope_long) << "context 131072 > original 128";
  ASSERT_EQ(c.rope_freq_factors.size(), 32u);
  EXPECT_FLOAT_EQ(c.rope_freq_factors.front(), 1.0f);
  EXPECT_FLOAT_EQ(c.rope_freq_factors.back(), 61.0f);  // the long factors synth writes (short: up to 3)
  // convert_hf_to_gguf.py's attention factor: sqrt(1 + ln(131072 / 128) / ln(128)).
  EXPECT_FLOAT_EQ(c.rope_attn_factor, static_cast<float>(std::sqrt(1.0 + std::log(1024.0) / std::log(128.0))));
  EXPECT_FALSE(c.rope_yarn);
}

// A minimal llama GGUF with extra metadata, for the refusals.
std::string tiny_llama(const std::string& dir, const std::string& key, const std::string& value) {
  loaders::GgufWriter w = testing::tiny_llama_writer();
  w.set_string(key, value);
  for (const char* n : {"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"}) w.add_tensor(n, 0, {32, 32});
  return testing::write_zeros(w, dir + "/tiny.gguf");
}

TEST_F(FamilyTest, UnsupportedRopeScalingIsRefusedByName) {
  auto m = load_model(tiny_llama(dir_, "llama.rope.scaling.type", "longrope"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(m.error().message.find("llama.rope.scaling.type = 'longrope'"), std::string::npos) << m.error().to_string();
  auto yarn = load_model(tiny_llama(dir_, "llama.rope.scaling.type", "yarn"));  // every family (llama.cpp's rope_yarn)
  ASSERT_TRUE(yarn.ok()) << yarn.error().to_string();
  EXPECT_TRUE((*yarn)->config().rope_yarn);
  auto lin = load_model(tiny_llama(dir_, "llama.rope.scaling.type", "linear"));
  ASSERT_TRUE(lin.ok()) << lin.error().to_string();
  EXPECT_FLOAT_EQ((*lin)->config().rope_freq_scale, 1.0f);  // no factor key: scale 1
}

TEST_F(FamilyTest, LongRopeNeedsBothFactorTensorsAndNoRopeFreqs) {
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"rope_factors_long.weight"},
                                                std::vector<std::string>{"rope_factors_short.weight"},
                                                std::vector<std::string>{"rope_factors_long.weight", "rope_factors_short.weight",
                                                                         "rope_freqs.weight"}}) {
    loaders::GgufWriter w = testing::tiny_llama_writer();
    for (const char* n : {"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"}) w.add_tensor(n, 0, {32, 32});
    for (const std::string& n : extra) w.add_tensor(n, 0, {4});
    auto m = load_model(testing::write_zeros(w, dir_ + "/longrope.gguf"));
    ASSERT_FALSE(m.ok()) << extra.size();
    EXPECT_EQ(m.error().code, ErrorCode::kCorruptFile);
    EXPECT_NE(m.error().message.find("LongRoPE needs both"), std::string::npos) << m.error().message;
  }
}

TEST_F(FamilyTest, RopeKeysThatComputeDifferentlyFingerprintDifferently) {
  auto file = [&](const std::string& name, const std::function<void(loaders::GgufWriter&)>& keys) {
    loaders::GgufWriter w = testing::tiny_llama_writer();
    for (const char* n : {"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"}) w.add_tensor(n, 0, {32, 32});
    keys(w);
    auto m = load_model(testing::write_zeros(w, dir_ + "/" + name + ".gguf"));
    EXPECT_TRUE(m.ok()) << name << ": " << (m.ok() ? "" : m.error().to_string());
    return m.ok() ? (*m)->fingerprint : 0;
  };
  const uint64_t linear = file("linear", [](loaders::GgufWriter& w) { w.set_f32("llama.rope.scaling.factor", 2.0f); });
  const uint64_t attn = file("attn", [](loaders::GgufWriter& w) { w.set_f32("llama.rope.scaling.attn_factor", 0.5f); });
  const uint64_t yarn = file("yarn", [](loaders::GgufWriter& w) {
    w.set_string("llama.rope.scaling.type", "yarn");
    w.set_f32("llama.rope.scaling.factor", 2.0f);
  });
  // An explicit "none" ignores the factor (llama.cpp forces freq_scale 1): the plain model.
  const uint64_t none = file("none", [](loaders::GgufWriter& w) {
    w.set_string("llama.rope.scaling.type", "none");
    w.set_f32("llama.rope.scaling.factor", 2.0f);
  });
  const uint64_t plain = file("plain", [](loaders::GgufWriter&) {});
  EXPECT_NE(linear, attn);
  EXPECT_NE(linear, yarn);
  EXPECT_NE(attn, plain);
  EXPECT_EQ(none, plain);
}

}  // namespace
}  // namespace tessera
