// Hugging Face directories: safetensors written by the test (single file and sharded; F32,
// F16, BF16) from the stories260K weights must load to the same values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "half.h"
#include "safetensors_writer.h"
#include "tessera/testing/paths.h"
#include "tessera/model/model.h"

namespace tessera::worker {
namespace {

using testutil::StTensor;

// Source values: the stories260K checkpoint (F32).
const Model& source() {
  static std::unique_ptr<Model> m = [] {
    auto r = load_model(testing::shared_path("models/stories260K/stories260K.bin"));
    EXPECT_TRUE(r.ok());
    return std::move(r).value();
  }();
  return *m;
}

StTensor encode(const Tensor& t, const std::string& dtype, bool as_vector = false) {
  StTensor s;
  s.dtype = dtype;
  s.shape = as_vector ? std::vector<int64_t>{t.cols} : std::vector<int64_t>{t.rows, t.cols};
  const size_t n = static_cast<size_t>(t.rows * t.cols);
  const float* f = t.f32();
  if (dtype == "F32") {
    s.bytes.resize(n * 4);
    std::memcpy(s.bytes.data(), f, n * 4);
  } else {
    s.bytes.resize(n * 2);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = dtype == "F16" ? loaders::f32_to_fp16(f[i]) : loaders::f32_to_bf16(f[i]);
      std::memcpy(s.bytes.data() + 2 * i, &h, 2);
    }
  }
  return s;
}

// The value a stored element decodes to.
float decoded(float x, const std::string& dtype) {
  if (dtype == "F16") return loaders::fp16_to_f32(loaders::f32_to_fp16(x));
  if (dtype == "BF16") return loaders::bf16_to_f32(loaders::f32_to_bf16(x));
  return x;
}

std::map<std::string, StTensor> hf_tensors(const std::string& dtype, bool with_lm_head) {
  const Model& m = source();
  std::map<std::string, StTensor> t;
  t["model.embed_tokens.weight"] = encode(m.tok_embeddings, dtype);
  t["model.norm.weight"] = encode(m.final_norm, dtype, true);
  if (with_lm_head) t["lm_head.weight"] = encode(m.tok_embeddings, dtype);
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const LayerWeights& w = m.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t[p + "input_layernorm.weight"] = encode(w.attn_norm, dtype, true);
    t[p + "post_attention_layernorm.weight"] = encode(w.ffn_norm, dtype, true);
    t[p + "self_attn.q_proj.weight"] = encode(w.wq, dtype);
    t[p + "self_attn.k_proj.weight"] = encode(w.wk, dtype);
    t[p + "self_attn.v_proj.weight"] = encode(w.wv, dtype);
    t[p + "self_attn.o_proj.weight"] = encode(w.wo, dtype);
    t[p + "mlp.gate_proj.weight"] = encode(w.w_gate, dtype);
    t[p + "mlp.up_proj.weight"] = encode(w.w_up, dtype);
    t[p + "mlp.down_proj.weight"] = encode(w.w_down, dtype);
  }
  t["model.rotary_emb.inv_freq"] = StTensor{"F32", {4}, std::vector<uint8_t>(16, 0)};  // ignored
  return t;
}

std::string config_json(bool tie) {
  return R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 5,
  "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 512, "max_position_embeddings": 512,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": )" +
         std::string(tie ? "true" : "false") + "}";
}

// Loaded tensor (any dtype) element i as float.
float element(const Tensor& t, size_t i) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  switch (t.dtype) {
    case DType::kF32: { float f; std::memcpy(&f, p + 4 * i, 4); return f; }
    case DType::kF16: return loaders::fp16_to_f32(loaders::load_u16(p + 2 * i));
    case DType::kBF16: return loaders::bf16_to_f32(loaders::load_u16(p + 2 * i));
    default: ADD_FAILURE() << "unexpected dtype"; return 0;
  }
}

void expect_same_values(const Tensor& got, const Tensor& want, const std::string& dtype, DType want_dtype,
                        const char* what) {
  ASSERT_EQ(got.dtype, want_dtype) << what;
  ASSERT_EQ(got.rows, want.rows) << what;
  ASSERT_EQ(got.cols, want.cols) << what;
  const size_t n = static_cast<size_t>(want.rows * want.cols);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(element(got, i), decoded(want.f32()[i], dtype)) << what << " element " << i;
  }
}

void expect_model_matches(const Model& got, const std::string& dtype) {
  const Model& m = source();
  const DType dt = dtype == "F32" ? DType::kF32 : dtype == "F16" ? DType::kF16 : DType::kBF16;
  EXPECT_EQ(got.format(), ModelFormat::kSafetensors);
  EXPECT_EQ(got.config().rope_layout, RopeLayout::kHalves);
  EXPECT_EQ(got.config().dim, 64);
  EXPECT_EQ(got.config().n_kv_heads, 4);
  EXPECT_EQ(got.config().head_dim, 8);
  expect_same_values(got.tok_embeddings, m.tok_embeddings, dtype, dt, "embedding");
  expect_same_values(got.final_norm, m.final_norm, dtype, DType::kF32, "final norm (converted to f32)");
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const LayerWeights& a = got.layers[l];
    const LayerWeights& b = m.layers[l];
    expect_same_values(a.attn_norm, b.attn_norm, dtype, DType::kF32, "attn_norm");
    expect_same_values(a.ffn_norm, b.ffn_norm, dtype, DType::kF32, "ffn_norm");
    expect_same_values(a.wq, b.wq, dtype, dt, "wq");
    expect_same_values(a.wk, b.wk, dtype, dt, "wk");
    expect_same_values(a.wv, b.wv, dtype, dt, "wv");
    expect_same_values(a.wo, b.wo, dtype, dt, "wo");
    expect_same_values(a.w_gate, b.w_gate, dtype, dt, "gate");
    expect_same_values(a.w_up, b.w_up, dtype, dt, "up");
    expect_same_values(a.w_down, b.w_down, dtype, dt, "down");
  }
}

class HfDirectory : public ::testing::TestWithParam<std::string> {};

TEST_P(HfDirectory, SingleFileLoadsSameValues) {
  const std::string dtype = GetParam();
  const std::string dir = testing::make_temp_dir("tessera-hf-single");
  testutil::write_text(dir + "/config.json", config_json(true));
  testutil::write_bytes(dir + "/model.safetensors", testutil::safetensors_bytes(hf_tensors(dtype, false),
                                                                                {{"__metadata__", {{"format", "pt"}}}}));
  auto r = load_model(dir);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  expect_model_matches(**r, dtype);
  EXPECT_TRUE((*r)->config().tied_embeddings);
  EXPECT_EQ((*r)->output.data, (*r)->tok_embeddings.data);
  // Same config and values as the llama2.c file except the RoPE layout and dtype.
  if (dtype == "F32") {
    EXPECT_EQ((*r)->parameter_count(), source().parameter_count());
  }
  std::filesystem::remove_all(dir);
}

TEST_P(HfDirectory, ShardedLoadsSameValues) {
  const std::string dtype = GetParam();
  const std::string dir = testing::make_temp_dir("tessera-hf-sharded");
  testutil::write_text(dir + "/config.json", config_json(false));
  // Split by name: everything under model.layers.[0-2] in shard 1, the rest in shard 2.
  std::map<std::string, StTensor> a, b;
  nlohmann::json weight_map;
  for (auto& [name, t] : hf_tensors(dtype, true)) {
    const bool first = name.rfind("model.layers.0.", 0) == 0 || name.rfind("model.layers.1.", 0) == 0 ||
                       name.rfind("model.layers.2.", 0) == 0;
    const std::string file = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    weight_map[name] = file;
    (first ? a : b)[name] = std::move(t);
  }
  testutil::write_bytes(dir + "/model-00001-of-00002.safetensors", testutil::safetensors_bytes(a));
  testutil::write_bytes(dir + "/model-00002-of-00002.safetensors", testutil::safetensors_bytes(b));
  testutil::write_text(dir + "/model.safetensors.index.json",
                       nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
  auto r = load_model(dir);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  expect_model_matches(**r, dtype);
  EXPECT_FALSE((*r)->config().tied_embeddings);
  expect_same_values((*r)->output, source().tok_embeddings, dtype, (*r)->tok_embeddings.dtype, "lm_head");
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HfDirectory, ::testing::Values("F32", "F16", "BF16"));

TEST(HfDirectoryQwen2, BiasesLoadAsF32AndMissingBiasIsNamed) {
  const std::string dir = testing::make_temp_dir("tessera-hf-qwen2");
  testutil::write_text(dir + "/config.json", R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 172,
    "num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 512,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true})");
  auto tensors = hf_tensors("BF16", false);
  const Model& m = source();
  for (size_t l = 0; l < 5; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    // Reuse norm-sized slices of real weights as biases: q bias [64], k/v bias [32].
    Tensor q{DType::kF32, 1, 64, m.layers[l].wq.data};
    Tensor kv{DType::kF32, 1, 32, m.layers[l].wk.data};
    tensors[p + "q_proj.bias"] = encode(q, "BF16", true);
    tensors[p + "k_proj.bias"] = encode(kv, "BF16", true);
    tensors[p + "v_proj.bias"] = encode(kv, "BF16", true);
  }
  testutil::write_bytes(dir + "/model.safetensors", testutil::safetensors_bytes(tensors));
  auto r = load_model(dir);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  const ModelConfig& c = (*r)->config();
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_TRUE(c.attn_bias);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  expect_same_values((*r)->layers[3].bq, Tensor{DType::kF32, 1, 64, m.layers[3].wq.data}, "BF16", DType::kF32, "bq");
  expect_same_values((*r)->layers[3].bv, Tensor{DType::kF32, 1, 32, m.layers[3].wk.data}, "BF16", DType::kF32, "bv");

  tensors.erase("model.layers.2.self_attn.k_proj.bias");
  testutil::write_bytes(dir + "/model.safetensors", testutil::safetensors_bytes(tensors));
  auto bad = load_model(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kCorruptFile);
  EXPECT_NE(bad.error().message.find("missing tensor blk.2.attn_k.bias"), std::string::npos) << bad.error().message;
  std::filesystem::remove_all(dir);
}

// transformers' _compute_llama3_parameters (modeling_rope_utils.py), transcribed: the scaled
// inverse frequencies; Tessera stores each frequency's divisor (inv_freq / scaled).
std::vector<double> hf_llama3_divisors(double theta, int head_dim, double factor, double low, double high, double old) {
  std::vector<double> out;
  for (int i = 0; i < head_dim; i += 2) {
    const double inv_freq = 1.0 / std::pow(theta, static_cast<double>(i) / head_dim);
    const double wavelen = 2.0 * M_PI / inv_freq;
    double scaled = inv_freq;
    if (wavelen > old / low) {
      scaled = inv_freq / factor;
    } else if (wavelen >= old / high) {
      const double smooth = (old / wavelen - low) / (high - low);
      scaled = (1.0 - smooth) * inv_freq / factor + smooth * inv_freq;
    }
    out.push_back(inv_freq / scaled);
  }
  return out;
}

Result<std::unique_ptr<Model>> load_with_rope_scaling(const std::string& dir, const std::string& rope_scaling) {
  std::string config = config_json(true);
  config.insert(config.rfind('}'), R"(, "rope_scaling": )" + rope_scaling);
  config.replace(config.find("10000.0"), 7, "500000.0");
  testutil::write_text(dir + "/config.json", config);
  return load_model(dir);
}

TEST(HfDirectoryRopeScaling, Llama3LinearDynamicAndRefusals) {
  const std::string dir = testing::make_temp_dir("tessera-hf-rope");
  testutil::write_bytes(dir + "/model.safetensors", testutil::safetensors_bytes(hf_tensors("F32", false)));
  {
    // Llama 3.2's values, on head_dim 8 with theta 5e5: wavelengths 6.3, 167 (kept), 4443
    // (smoothed: between 8192/4 and 8192/1), 118,000 (divided by the factor).
    auto r = load_with_rope_scaling(dir, R"({"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})");
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    const ModelConfig& c = (*r)->config();
    const std::vector<double> want = hf_llama3_divisors(5e5, 8, 32.0, 1.0, 4.0, 8192.0);
    ASSERT_EQ(c.rope_freq_factors.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(c.rope_freq_factors[i], want[i], 1e-5 * want[i]) << i;
    EXPECT_EQ(c.rope_freq_factors[0], 1.0f);
    EXPECT_GT(c.rope_freq_factors[2], 1.0f);
    EXPECT_LT(c.rope_freq_factors[2], 32.0f);
    EXPECT_EQ(c.rope_freq_factors[3], 32.0f);
    EXPECT_EQ(c.rope_freq_scale, 1.0f);
  }
  {
    // Older configs name it "type"; other factors.
    auto r = load_with_rope_scaling(dir, R"({"type": "llama3", "factor": 8.0, "low_freq_factor": 2.0,
      "high_freq_factor": 8.0, "original_max_position_embeddings": 4096})");
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    const std::vector<double> want = hf_llama3_divisors(5e5, 8, 8.0, 2.0, 8.0, 4096.0);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR((*r)->config().rope_freq_factors[i], want[i], 1e-5 * want[i]) << i;
  }
  {
    auto r = load_with_rope_scaling(dir, R"({"rope_type": "linear", "factor": 4.0})");
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_EQ((*r)->config().rope_freq_scale, 0.25f);
    EXPECT_TRUE((*r)->config().rope_freq_factors.empty());
  }
  for (const char* plain : {R"({"rope_type": "default"})", R"({"type": "dynamic", "factor": 2.0})"}) {
    auto r = load_with_rope_scaling(dir, plain);
    ASSERT_TRUE(r.ok()) << plain << ": " << r.error().to_string();
    EXPECT_EQ((*r)->config().rope_freq_scale, 1.0f) << plain;
    EXPECT_TRUE((*r)->config().rope_freq_factors.empty()) << plain;
  }
  struct Bad {
    const char* rope_scaling;
    ErrorCode code;
    const char* message;
  };
  {
    // Qwen2.5's long-context setting: llama.cpp's rope_yarn with the converter's keys.
    auto r = load_with_rope_scaling(dir, R"({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})");
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_TRUE((*r)->config().rope_yarn);
    EXPECT_EQ((*r)->config().yarn_orig_ctx, 32768);
    EXPECT_EQ((*r)->config().rope_freq_scale, 0.25f);
    auto d = load_with_rope_scaling(dir, R"({"rope_type": "yarn", "factor": 2.0})");  // original: max_position_embeddings
    ASSERT_TRUE(d.ok()) << d.error().to_string();
    EXPECT_EQ((*d)->config().yarn_orig_ctx, 512);
  }
  for (const Bad& b : {Bad{R"({"rope_type": "yarn", "factor": 4.0, "beta_fast": 16})", ErrorCode::kUnsupported,
                           "rope_scaling yarn with other beta_fast"},
                       Bad{R"({"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.0})", ErrorCode::kUnsupported,
                           "attention_factor"},
                       Bad{R"({"rope_type": "yarn", "factor": 4.0, "mscale": 0.707, "mscale_all_dim": 0.707})",
                           ErrorCode::kUnsupported, "mscale keys"},
                       Bad{R"({"rope_type": "yarn", "factor": 0.5})", ErrorCode::kCorruptFile, "factor >= 1"},
                       Bad{R"({"rope_type": "longrope"})", ErrorCode::kUnsupported, "'longrope'"},
                       Bad{R"({"rope_type": "llama3", "factor": 0.5})", ErrorCode::kCorruptFile, "factor must be"},
                       Bad{R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0})",
                           ErrorCode::kCorruptFile, "low_freq_factor"},
                       Bad{R"({"rope_type": 3})", ErrorCode::kCorruptFile, "rope_type"},
                       Bad{R"([1, 2])", ErrorCode::kCorruptFile, "rope_scaling is not an object"},
                       // head_dim is bounded before the factors are sized by it.
                       Bad{R"({"rope_type": "llama3", "factor": 8.0}, "head_dim": 2147483647)", ErrorCode::kCorruptFile,
                           "head_dim 2147483647 must be even and in [2, 4096]"}}) {
    auto r = load_with_rope_scaling(dir, b.rope_scaling);
    ASSERT_FALSE(r.ok()) << b.rope_scaling;
    EXPECT_EQ(r.error().code, b.code) << b.rope_scaling;
    EXPECT_NE(r.error().message.find(b.message), std::string::npos) << r.error().message;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::worker
