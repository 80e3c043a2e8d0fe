// llama2.c checkpoint loading: config values exact, tensors equal to the file's fp32 arrays.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "tessera/testing/paths.h"
#include "tessera/model/model.h"

namespace tessera::worker {
namespace {

std::vector<float> read_floats(const std::string& path, size_t skip_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out((bytes.size() - skip_bytes) / 4);
  std::memcpy(out.data(), bytes.data() + skip_bytes, out.size() * 4);
  return out;
}

TEST(Llama2c, Stories260KConfigAndTensors) {
  const std::string path = testing::shared_path("models/stories260K/stories260K.bin");
  auto r = load_model(path);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  const Model& m = **r;
  const ModelConfig& c = m.config();
  EXPECT_EQ(m.format(), ModelFormat::kLlama2c);
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_EQ(c.rope_layout, RopeLayout::kInterleaved);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.attn_bias);
  EXPECT_EQ(m.output.data, m.tok_embeddings.data);

  // Walk the file's arrays in order and compare with the Model's tensors element by element.
  const std::vector<float> f = read_floats(path, 28);
  size_t off = 0;
  auto expect_tensor = [&](const Tensor& t, int64_t rows, int64_t cols, const char* what) {
    ASSERT_EQ(t.dtype, DType::kF32) << what;
    ASSERT_EQ(t.rows, rows) << what;
    ASSERT_EQ(t.cols, cols) << what;
    ASSERT_EQ(std::memcmp(t.f32(), f.data() + off, static_cast<size_t>(rows * cols) * 4), 0) << what;
    off += static_cast<size_t>(rows * cols);
  };
  expect_tensor(m.tok_embeddings, 512, 64, "embedding");
  for (const auto& l : m.layers) expect_tensor(l.attn_norm, 1, 64, "rms_att");
  for (const auto& l : m.layers) expect_tensor(l.wq, 64, 64, "wq");
  for (const auto& l : m.layers) expect_tensor(l.wk, 32, 64, "wk");
  for (const auto& l : m.layers) expect_tensor(l.wv, 32, 64, "wv");
  for (const auto& l : m.layers) expect_tensor(l.wo, 64, 64, "wo");
  for (const auto& l : m.layers) expect_tensor(l.ffn_norm, 1, 64, "rms_ffn");
  for (const auto& l : m.layers) expect_tensor(l.w_gate, 172, 64, "w1");
  for (const auto& l : m.layers) expect_tensor(l.w_down, 64, 172, "w2");
  for (const auto& l : m.layers) expect_tensor(l.w_up, 172, 64, "w3");
  expect_tensor(m.final_norm, 1, 64, "rms_final");
  EXPECT_EQ(off + 2 * 512 * 4, f.size());  // freq_cis tables remain

  // 260K parameters (tied classifier counted once).
  EXPECT_EQ(m.parameter_count(), 512 * 64 + 5 * (64 + 64 * 64 * 2 + 32 * 64 * 2 + 64 + 172 * 64 * 3) + 64);
  EXPECT_NE(m.fingerprint, 0u);
  auto again = load_model(path, LoadOptions{.use_mmap = false});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->fingerprint, m.fingerprint);
  EXPECT_EQ(std::memcmp((*again)->layers[4].w_down.data, m.layers[4].w_down.data, 64 * 172 * 4), 0);
}

TEST(Llama2c, TruncatedAndMissingFilesAreErrors) {
  auto missing = load_model("/nonexistent/model.bin");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kIoError);
  EXPECT_NE(missing.error().message.find("/nonexistent/model.bin"), std::string::npos);

  const std::string dir = testing::make_temp_dir("tessera-llama2c");
  std::ifstream in(testing::shared_path("models/stories260K/stories260K.bin"), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t cut : {size_t{0}, size_t{27}, size_t{28}, size_t{1000}, bytes.size() - 1}) {
    const std::string p = dir + "/cut" + std::to_string(cut) + ".bin";
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(cut));
    auto r = load_model(p);
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_EQ(r.error().code, ErrorCode::kTruncatedFile) << cut << " " << r.error().to_string();
    EXPECT_NE(r.error().message.find(p), std::string::npos);
  }
  // n_heads = 7 does not divide dim = 64: patch the int32 at byte 12 of a copy.
  const std::string p = dir + "/heads.bin";
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  {
    std::fstream f(p, std::ios::binary | std::ios::in | std::ios::out);
    const int32_t seven = 7;
    f.seekp(12);
    f.write(reinterpret_cast<const char*>(&seven), 4);
  }
  auto r = load_model(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kCorruptFile);
  EXPECT_NE(r.error().message.find("n_heads"), std::string::npos) << r.error().message;

  // A newer export.py file ("ak42" magic, version 2).
  const std::string v2 = dir + "/v2.bin";
  {
    std::ofstream f(v2, std::ios::binary);
    const uint32_t header[2] = {0x616b3432u, 2};
    f.write(reinterpret_cast<const char*>(header), sizeof header);
    f.write(bytes.data(), 256);
  }
  auto r2 = load_model(v2);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(r2.error().message.find("export version 2"), std::string::npos) << r2.error().message;
}

}  // namespace
}  // namespace tessera::worker
