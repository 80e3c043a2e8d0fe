// model synth: synth -> load gives the requested shape; values are sane and deterministic;
// Q8_0 blocks equal a reference quantizer written here from ggml's quantize_row_q8_0_ref;
// F16 equals IEEE round-to-nearest-even conversions of the F32 file's values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <algorithm>
#include <set>

#include "half.h"
#include "safetensors_writer.h"
#include "synth.h"
#include "tessera/common/quants.h"
#include "tessera/testing/paths.h"
#include "tessera/model/model.h"
#include "tessera/model/model_synth.h"

namespace tessera::worker {
namespace {

// ggml's quantize_row_q8_0_ref, transcribed independently of the code under test.
std::vector<uint8_t> reference_q8_0(const float* x, int64_t n) {
  std::vector<uint8_t> out(static_cast<size_t>(n / 32 * 34));
  for (int64_t i = 0; i < n / 32; i++) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[i * 32 + j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    const uint16_t dh = loaders::f32_to_fp16(d);
    std::memcpy(&out[static_cast<size_t>(i * 34)], &dh, 2);
    for (int j = 0; j < 32; ++j) {
      const float x0 = x[i * 32 + j] * id;
      out[static_cast<size_t>(i * 34 + 2 + j)] = static_cast<uint8_t>(static_cast<int8_t>(roundf(x0)));
    }
  }
  return out;
}

std::string synth(const std::string& dir, const std::string& like, DType dtype, uint64_t seed,
                  const std::string& vocab_from = "") {
  const std::string out = dir + "/" + like + "-" + dtype_name(dtype) + "-" + std::to_string(seed) + ".gguf";
  Status st = synth_model(SynthOptions{.like = like, .dtype = dtype, .out_path = out, .seed = seed, .vocab_from = vocab_from});
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  return out;
}

std::unique_ptr<Model> load(const std::string& path) {
  auto r = load_model(path);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Half, KnownConversions) {
  EXPECT_EQ(loaders::f32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(loaders::f32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(loaders::f32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(loaders::f32_to_fp16(1e6f), 0x7C00);          // overflow -> inf
  EXPECT_EQ(loaders::f32_to_fp16(0.1f), 0x2E66);          // rounded to nearest
  EXPECT_EQ(loaders::f32_to_fp16(1.0f + 0x1p-11f), 0x3C00);  // tie -> even
  EXPECT_EQ(loaders::f32_to_fp16(1.0f + 0x1p-10f + 0x1p-11f), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(loaders::f32_to_fp16(0x1p-24f), 0x0001);      // smallest subnormal
  EXPECT_EQ(loaders::fp16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(loaders::fp16_to_f32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(loaders::fp16_to_f32(0xFC00)));
  EXPECT_EQ(loaders::f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(loaders::bf16_to_f32(0x4049), 3.140625f);
}

TEST(Synth, Stories260kShapeRoundTripsAndValuesAreSane) {
  const std::string dir = testing::make_temp_dir("tessera-synth");
  auto m = load(synth(dir, "stories260k", DType::kF32, 7));
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_TRUE(c.tied_embeddings);
  // Same parameter count as the real stories260K checkpoint.
  auto real = load(testing::shared_path("models/stories260K/stories260K.bin"));
  ASSERT_TRUE(real);
  EXPECT_EQ(m->parameter_count(), real->parameter_count());

  // Synthetic SentencePiece vocabulary.
  const VocabSpec& v = m->vocab;
  ASSERT_EQ(v.tokens.size(), 512u);
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.tokens[0], "<unk>");
  EXPECT_EQ(v.tokens[1], "<s>");
  EXPECT_EQ(v.tokens[2], "</s>");
  EXPECT_EQ(v.tokens[3 + 0x0A], "<0x0A>");
  EXPECT_EQ(v.token_types[3 + 0xFF], 6);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_EQ(v.unk_id, 0);
  EXPECT_EQ(std::set<std::string>(v.tokens.begin(), v.tokens.end()).size(), 512u);  // distinct
  for (size_t i = 260; i < 512; ++i) EXPECT_LT(v.scores[i], v.scores[i - 1]) << i;

  // Norms near 1, matrices small with std ~0.02.
  for (const LayerWeights& w : m->layers) {
    for (int64_t i = 0; i < 64; ++i) {
      EXPECT_GE(w.attn_norm.f32()[i], 0.95f);
      EXPECT_LE(w.ffn_norm.f32()[i], 1.05f);
    }
  }
  double sum = 0, sq = 0;
  const int64_t n = 172 * 64;
  for (int64_t i = 0; i < n; ++i) {
    const float x = m->layers[2].w_gate.f32()[i];
    ASSERT_LE(std::fabs(x), 0.0347f);
    sum += x;
    sq += double(x) * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.001);
  EXPECT_NEAR(std::sqrt(sq / n), 0.02, 0.001);
  std::filesystem::remove_all(dir);
}

TEST(Synth, DeterministicPerSeed) {
  const std::string dir = testing::make_temp_dir("tessera-synth-seed");
  const std::string a = synth(dir, "stories260k", DType::kF16, 1);
  const std::string b = dir + "/again.gguf";
  ASSERT_TRUE(synth_model(SynthOptions{.like = "stories260k", .dtype = DType::kF16, .out_path = b, .seed = 1, .vocab_from = ""}).ok());
  EXPECT_EQ(file_bytes(a), file_bytes(b));
  auto ma = load(a);
  auto mc = load(synth(dir, "stories260k", DType::kF16, 2));
  ASSERT_TRUE(ma && mc);
  EXPECT_NE(ma->fingerprint, mc->fingerprint);
  EXPECT_EQ(ma->fingerprint, load(b)->fingerprint);
  std::filesystem::remove_all(dir);
}

// Q8_0 / F16 files hold exactly the quantized / converted values of the F32 file (same seed).
TEST(Synth, Q8_0AndF16MatchReferenceConversionsOfF32) {
  const std::string dir = testing::make_temp_dir("tessera-synth-q8");
  auto f32 = load(synth(dir, "stories260k", DType::kF32, 3));
  auto q8 = load(synth(dir, "stories260k", DType::kQ8_0, 3));
  auto f16 = load(synth(dir, "stories260k", DType::kF16, 3));
  ASSERT_TRUE(f32 && q8 && f16);
  EXPECT_EQ(q8->config().dim, 64);
  struct Pair {
    const Tensor* ref;
    const Tensor* q;
    const Tensor* h;
  };
  std::vector<Pair> pairs = {{&f32->tok_embeddings, &q8->tok_embeddings, &f16->tok_embeddings}};
  for (size_t l = 0; l < 5; ++l) {
    const LayerWeights &a = f32->layers[l], &b = q8->layers[l], &h = f16->layers[l];
    pairs.push_back({&a.wq, &b.wq, &h.wq});
    pairs.push_back({&a.wk, &b.wk, &h.wk});
    pairs.push_back({&a.wo, &b.wo, &h.wo});
    pairs.push_back({&a.w_up, &b.w_up, &h.w_up});
    // ffn_down rows are 172 long (not a multiple of 32): they stay f32 in the q8_0 file.
    EXPECT_EQ(b.w_down.dtype, DType::kF32);
    EXPECT_EQ(std::memcmp(b.w_down.data, a.w_down.data, 64 * 172 * 4), 0);
    EXPECT_EQ(b.attn_norm.dtype, DType::kF32);
  }
  for (const Pair& p : pairs) {
    ASSERT_EQ(p.q->dtype, DType::kQ8_0);
    ASSERT_EQ(p.h->dtype, DType::kF16);
    const int64_t n = p.ref->rows * p.ref->cols;
    const std::vector<uint8_t> want = reference_q8_0(p.ref->f32(), n);
    ASSERT_EQ(std::memcmp(p.q->data, want.data(), want.size()), 0);
    const auto* h = static_cast<const uint8_t*>(p.h->data);
    for (int64_t i = 0; i < n; ++i) {
      const float back = loaders::fp16_to_f32(loaders::load_u16(h + 2 * i));
      // Round-to-nearest: within half an fp16 ulp (relative 2^-11, or 2^-25 for subnormals).
      const float x = p.ref->f32()[i];
      ASSERT_LE(std::fabs(back - x), std::max(std::fabs(x) * 0x1p-11f, 0x1p-25f)) << i;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(Synth, VocabFromTokenizerJsonAndErrors) {
  const std::string dir = testing::make_temp_dir("tessera-synth-vocab");
  // A tiny byte-level BPE tokenizer.json and a config.json naming bos/eos.
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < 300; ++i) vocab["t" + std::to_string(i)] = i + 2;
  nlohmann::json tok = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"t 1", "t 2"}}}},
                        {"added_tokens", {{{"id", 0}, {"content", "<|endoftext|>"}, {"special", true}},
                                          {{"id", 1}, {"content", "<|im_start|>"}, {"special", true}}}}};
  testutil::write_text(dir + "/tokenizer.json", tok.dump());
  testutil::write_text(dir + "/config.json", R"({"bos_token_id": 1, "eos_token_id": 0})");
  auto m = load(synth(dir, "stories260k", DType::kF32, 0, dir + "/tokenizer.json"));
  ASSERT_TRUE(m);
  const VocabSpec& v = m->vocab;
  EXPECT_EQ(v.model, "gpt2");
  ASSERT_EQ(v.tokens.size(), 512u);
  EXPECT_EQ(v.tokens[0], "<|endoftext|>");
  EXPECT_EQ(v.token_types[0], 3);
  EXPECT_EQ(v.tokens[5], "t3");
  EXPECT_EQ(v.token_types[5], 1);
  EXPECT_EQ(v.tokens[400], "<|reserved_400|>");  // padding up to the model's vocabulary
  EXPECT_EQ(v.merges, (std::vector<std::string>{"t 1", "t 2"}));
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 0);
  EXPECT_FALSE(v.add_bos);

  // The real SmolLM2 tokenizer (49152 tokens) does not fit a 512-token model.
  Status too_big = synth_model(SynthOptions{.like = "stories260k", .dtype = DType::kF32, .out_path = dir + "/x.gguf",
                                            .seed = 0,
                                            .vocab_from = testing::shared_path("tokenizers/smollm2/tokenizer.json")});
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.error().code, ErrorCode::kOutOfRange);
  Status unknown = synth_model(SynthOptions{.like = "gpt-5", .dtype = DType::kF32, .out_path = dir + "/y.gguf", .seed = 0, .vocab_from = ""});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(unknown.error().message.find("smollm2-135m"), std::string::npos);
  // Every weight type is written now; an unknown type name is the invalid argument.
  SynthOptions bad;
  Status q4 = parse_synth_dtype("q4_k_xl", &bad);
  ASSERT_FALSE(q4.ok());
  EXPECT_EQ(q4.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(q4.error().message.find("q4_k_m"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Synth, KnownShapesMatchTheRealModels) {
  auto smol = synth_shape("smollm2-135m");
  ASSERT_TRUE(smol.ok());
  EXPECT_EQ(smol->dim, 576);
  EXPECT_EQ(smol->hidden_dim, 1536);
  EXPECT_EQ(smol->n_layers, 30);
  EXPECT_EQ(smol->n_heads, 9);
  EXPECT_EQ(smol->n_kv_heads, 3);
  EXPECT_EQ(smol->vocab_size, 49152);
  EXPECT_EQ(smol->context_length, 8192);
  EXPECT_FLOAT_EQ(smol->rope_theta, 100000.0f);
  EXPECT_TRUE(smol->tied);
  auto l1b = synth_shape("llama-1b");
  ASSERT_TRUE(l1b.ok());
  EXPECT_EQ(l1b->dim, 2048);
  EXPECT_EQ(l1b->hidden_dim, 8192);
  EXPECT_EQ(l1b->n_layers, 16);
  EXPECT_EQ(l1b->n_heads, 32);
  EXPECT_EQ(l1b->n_kv_heads, 8);
  EXPECT_EQ(l1b->vocab_size, 128256);
  EXPECT_FLOAT_EQ(l1b->rope_theta, 500000.0f);
  auto qwen = synth_shape("qwen2-0.5b");
  ASSERT_TRUE(qwen.ok());
  EXPECT_EQ(qwen->architecture, "qwen2");
  EXPECT_TRUE(qwen->attn_bias);
}

}  // namespace
}  // namespace tessera::worker

namespace tessera::worker {
namespace {

// Every --dtype name writes a file that loads back with the planned type per tensor, and
// values that dequantize close to the f32 values.
TEST(Synth, EveryWeightTypeAndMixWritesAndLoads) {
  const std::string dir = ::testing::TempDir() + "/synth_types";
  std::filesystem::create_directories(dir);
  const SynthShape shape = *synth_shape("stories260k");
  for (const std::string& name : synth_dtype_names()) {
    SynthOptions o{.like = "stories260k", .out_path = dir + "/" + name + ".gguf", .seed = 3};
    ASSERT_TRUE(parse_synth_dtype(name, &o).ok()) << name;
    Status st = synth_model(o);
    ASSERT_TRUE(st.ok()) << name << ": " << st.error().to_string();
    auto model = load(o.out_path);
    ASSERT_NE(model, nullptr) << name;
    const LayerWeights& l0 = model->layers[0];
    EXPECT_EQ(l0.wq.dtype, synth_tensor_type(o, shape, "blk.0.attn_q.weight", 64)) << name;
    EXPECT_EQ(l0.w_down.dtype, synth_tensor_type(o, shape, "blk.0.ffn_down.weight", 172)) << name;
    EXPECT_EQ(model->tok_embeddings.dtype, synth_tensor_type(o, shape, "token_embd.weight", 64)) << name;
    // attn_q row 0 dequantizes close to the values synth drew.
    std::vector<float> want(64), got(64);
    std::vector<float> all(static_cast<size_t>(64 * 64));
    loaders::synth_values(3, "blk.0.attn_q.weight", 0, all.size(), all.data());
    std::copy(all.begin(), all.begin() + 64, want.begin());
    dequantize(l0.wq.dtype, l0.wq.data, got.data(), 64);
    double num = 0, den = 0;
    for (size_t i = 0; i < 64; ++i) {
      num += (got[i] - want[i]) * (got[i] - want[i]);
      den += want[i] * want[i];
    }
    EXPECT_LT(num / den, l0.wq.dtype == DType::kQ2_K ? 0.2 : 0.05) << name << " as " << dtype_name(l0.wq.dtype);
  }
  std::filesystem::remove_all(dir);
}

// The Q4_K_M rules of llama.cpp's llama_tensor_get_type on a Llama-3.2-1B shape (16 layers,
// all rows multiples of 256, tied head) and on SmolLM2-135M (576 columns: the K-quants fall back).
TEST(Synth, Q4KMPicksTypesLikeLlamaCpp) {
  SynthOptions o;
  ASSERT_TRUE(parse_synth_dtype("q4_k_m", &o).ok());
  EXPECT_EQ(o.mix, SynthMix::kQ4_K_M);
  const SynthShape big = *synth_shape("llama-1b");
  EXPECT_EQ(synth_tensor_type(o, big, "token_embd.weight", 2048), DType::kQ6_K);  // tied: the output head
  for (int i = 0; i < 16; ++i) {
    const bool more = i < 2 || i >= 14 || (i - 2) % 3 == 2;  // layers 0 1 4 7 10 13 14 15
    const std::string p = "blk." + std::to_string(i) + ".";
    EXPECT_EQ(synth_tensor_type(o, big, p + "attn_v.weight", 2048), more ? DType::kQ6_K : DType::kQ4_K) << i;
    EXPECT_EQ(synth_tensor_type(o, big, p + "ffn_down.weight", 8192), more ? DType::kQ6_K : DType::kQ4_K) << i;
    EXPECT_EQ(synth_tensor_type(o, big, p + "attn_q.weight", 2048), DType::kQ4_K) << i;
    EXPECT_EQ(synth_tensor_type(o, big, p + "ffn_up.weight", 2048), DType::kQ4_K) << i;
  }
  const SynthShape smol = *synth_shape("smollm2-135m");
  EXPECT_EQ(synth_tensor_type(o, smol, "token_embd.weight", 576), DType::kQ8_0);
  EXPECT_EQ(synth_tensor_type(o, smol, "blk.3.attn_k.weight", 576), DType::kQ5_0);
  EXPECT_EQ(synth_tensor_type(o, smol, "blk.0.attn_v.weight", 576), DType::kQ8_0);  // Q6_K falls back
  EXPECT_EQ(synth_tensor_type(o, smol, "blk.5.ffn_down.weight", 1536), DType::kQ6_K);
  ASSERT_TRUE(parse_synth_dtype("q5_k_m", &o).ok());
  EXPECT_EQ(synth_tensor_type(o, big, "blk.3.attn_q.weight", 2048), DType::kQ5_K);
  EXPECT_EQ(synth_tensor_type(o, big, "blk.4.attn_v.weight", 2048), DType::kQ6_K);
  EXPECT_EQ(synth_tensor_type(o, smol, "blk.3.attn_q.weight", 576), DType::kQ5_1);
}

}  // namespace
}  // namespace tessera::worker
