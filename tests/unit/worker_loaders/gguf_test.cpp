// GGUF loading: the llama2c-converted stories260K.gguf against the original .bin, and its
// embedded vocabulary against tok512.bin.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "file_bytes.h"
#include "gguf.h"
#include "tessera/testing/paths.h"
#include "tessera/model/model.h"

namespace tessera::worker {
namespace {

std::unique_ptr<Model> must_load(const std::string& path) {
  auto r = load_model(path);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.rows == b.rows && a.cols == b.cols &&
         std::memcmp(a.data, b.data, static_cast<size_t>(a.rows) * dtype_row_bytes(a.dtype, a.cols)) == 0;
}

TEST(Gguf, Stories260KMatchesLlama2cCheckpoint) {
  auto g = must_load(testing::shared_path("models/stories260K/stories260K.gguf"));
  auto b = must_load(testing::shared_path("models/stories260K/stories260K.bin"));
  ASSERT_TRUE(g && b);
  const ModelConfig& c = g->config();
  EXPECT_EQ(g->format(), ModelFormat::kGguf);
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 128);  // the converter writes context_length = 128
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_layout, RopeLayout::kInterleaved);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.attn_bias);
  EXPECT_NE(g->output.data, g->tok_embeddings.data);

  // Every tensor equals the checkpoint's, byte for byte: llama.cpp's llama2c converter copies
  // wq/wk without permuting them (llama2.c already stores the interleaved RoPE order), so
  // the interleaved layout applies to both files.
  EXPECT_TRUE(same_bytes(g->tok_embeddings, b->tok_embeddings));
  EXPECT_TRUE(same_bytes(g->output, b->tok_embeddings));  // written untied, same values
  EXPECT_TRUE(same_bytes(g->final_norm, b->final_norm));
  for (size_t l = 0; l < 5; ++l) {
    const LayerWeights& x = g->layers[l];
    const LayerWeights& y = b->layers[l];
    EXPECT_TRUE(same_bytes(x.attn_norm, y.attn_norm)) << l;
    EXPECT_TRUE(same_bytes(x.wq, y.wq)) << l;
    EXPECT_TRUE(same_bytes(x.wk, y.wk)) << l;
    EXPECT_TRUE(same_bytes(x.wv, y.wv)) << l;
    EXPECT_TRUE(same_bytes(x.wo, y.wo)) << l;
    EXPECT_TRUE(same_bytes(x.ffn_norm, y.ffn_norm)) << l;
    EXPECT_TRUE(same_bytes(x.w_gate, y.w_gate)) << l;
    EXPECT_TRUE(same_bytes(x.w_up, y.w_up)) << l;
    EXPECT_TRUE(same_bytes(x.w_down, y.w_down)) << l;
  }
  EXPECT_EQ(g->parameter_count(), b->parameter_count() + 512 * 64);  // + untied output
}

// tok512.bin: int32 max_token_length, then per token {f32 score, int32 len, bytes}.
TEST(Gguf, Stories260KVocabularyMatchesTok512) {
  auto g = must_load(testing::shared_path("models/stories260K/stories260K.gguf"));
  ASSERT_TRUE(g);
  const VocabSpec& v = g->vocab;
  EXPECT_EQ(v.model, "llama");
  ASSERT_EQ(v.tokens.size(), 512u);
  ASSERT_EQ(v.scores.size(), 512u);
  ASSERT_EQ(v.token_types.size(), 512u);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_EQ(v.tokens[1], "<s>");
  EXPECT_EQ(v.tokens[2], "</s>");
  EXPECT_EQ(v.tokens[3 + 0x41], "<0x41>");
  EXPECT_EQ(v.token_types[3 + 0x41], 6);  // byte token

  std::ifstream in(testing::shared_path("models/stories260K/tok512.bin"), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t off = 4;
  int differing_text = 0;
  for (size_t i = 0; i < 512; ++i) {
    float score;
    int32_t len;
    ASSERT_LE(off + 8, bytes.size());
    std::memcpy(&score, bytes.data() + off, 4);
    std::memcpy(&len, bytes.data() + off + 4, 4);
    off += 8;
    const std::string piece(bytes.data() + off, static_cast<size_t>(len));
    off += static_cast<size_t>(len);
    EXPECT_FLOAT_EQ(v.scores[i], score) << i;
    // tok512.bin stores spaces as ' ', GGUF as U+2581; <s>/</s> are stored as text in both.
    std::string expected = piece;
    for (size_t p = 0; (p = expected.find(' ', p)) != std::string::npos;) expected.replace(p, 1, "\xE2\x96\x81");
    if (v.tokens[i] != expected && v.tokens[i] != piece) ++differing_text;
  }
  // Control tokens may be spelled differently (llama2.c writes "\n<s>\n"); the rest must match.
  EXPECT_LE(differing_text, 3);
}

TEST(Gguf, ParserReportsMetadataTypesAndAlignment) {
  auto fb = loaders::FileBytes::open(testing::shared_path("models/stories260K/stories260K.gguf"), true);
  ASSERT_TRUE(fb.ok());
  auto g = loaders::parse_gguf(**fb);
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  EXPECT_EQ(g->version, 3u);
  EXPECT_EQ(g->alignment, 32u);
  EXPECT_EQ(g->data_offset % 32, 0u);
  EXPECT_EQ(g->tensors.size(), 2u + 1u + 5u * 9u);  // embd, output, output_norm, 9 per block
  const loaders::GgufValue* ctx = g->find("llama.context_length");
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(ctx->i, 128);
  const loaders::GgufValue* tokens = g->find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->type, loaders::GgufType::kArray);
  EXPECT_EQ(tokens->elem, loaders::GgufType::kString);
}

}  // namespace
}  // namespace tessera::worker
