// Malformed GGUF inputs: each gives a Result error with the right code and a message that
// names the file and what is wrong — never a crash. Cases corrupt a crafted tiny model
// (fuzz/seeds.h) at exact field offsets, and truncate the real stories260K.gguf.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>

#include "gguf.h"
#include "loaded_model.h"
#include "seeds.h"
#include "tessera/testing/paths.h"

namespace tessera::worker {
namespace {

using Bytes = std::vector<uint8_t>;
using loaders::GgufLayout;

Result<std::unique_ptr<Model>> load_bytes(const Bytes& b, const std::string& name = "crafted.gguf") {
  return loaders::load_gguf(loaders::FileBytes::copy_of(b.data(), b.size(), name));
}

template <class T>
void put(Bytes& b, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), b.size());
  std::memcpy(b.data() + at, &v, sizeof(T));
}

uint64_t get_u64(const Bytes& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}

// Offset of the value of metadata `key` (after its type field), and of its type field.
size_t kv_type_offset(const Bytes& b, const GgufLayout& l, const std::string& key) {
  for (size_t off : l.kv_offsets) {
    const uint64_t len = get_u64(b, off);
    if (std::string(reinterpret_cast<const char*>(b.data() + off + 8), len) == key) return off + 8 + len;
  }
  ADD_FAILURE() << "no key " << key;
  return 0;
}
size_t kv_value_offset(const Bytes& b, const GgufLayout& l, const std::string& key) {
  return kv_type_offset(b, l, key) + 4;
}

// Field offsets inside the tensor info of `name`.
struct InfoFields {
  size_t name, n_dims, ne0, type, offset;
};
InfoFields tensor_info(const Bytes& b, const GgufLayout& l, const std::string& name) {
  for (size_t off : l.tensor_info_offsets) {
    const uint64_t len = get_u64(b, off);
    if (std::string(reinterpret_cast<const char*>(b.data() + off + 8), len) != name) continue;
    const size_t n_dims = off + 8 + len;
    uint32_t nd;
    std::memcpy(&nd, b.data() + n_dims, 4);
    return {off + 8, n_dims, n_dims + 4, n_dims + 4 + 8 * nd, n_dims + 4 + 8 * nd + 4};
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

struct Case {
  const char* name;
  std::function<void(fuzz::TinyGguf&)> edit_writer;        // before serializing (may be null)
  std::function<void(Bytes&, const GgufLayout&)> edit_bytes;  // after (may be null)
  ErrorCode code;
  const char* message_part;
};

std::vector<Case> cases() {
  using fuzz::TinyGguf;
  return {
      {"bad magic", nullptr, [](Bytes& b, const GgufLayout&) { b[0] = 'X'; }, ErrorCode::kCorruptFile, "magic"},
      {"version 1", nullptr, [](Bytes& b, const GgufLayout&) { put<uint32_t>(b, 4, 1); }, ErrorCode::kUnsupported,
       "GGUF version 1 is not supported"},
      {"version 4", nullptr, [](Bytes& b, const GgufLayout&) { put<uint32_t>(b, 4, 4); }, ErrorCode::kUnsupported,
       "GGUF version 4"},
      {"huge tensor count", nullptr, [](Bytes& b, const GgufLayout&) { put<uint64_t>(b, 8, 1ull << 60); },
       ErrorCode::kTruncatedFile, "tensor infos"},
      {"huge metadata count", nullptr, [](Bytes& b, const GgufLayout&) { put<uint64_t>(b, 16, ~0ull); },
       ErrorCode::kTruncatedFile, "metadata"},
      {"huge key length", nullptr, [](Bytes& b, const GgufLayout& l) { put<uint64_t>(b, l.kv_offsets[0], 1ull << 40); },
       ErrorCode::kTruncatedFile, "metadata key #0"},
      {"unknown value type", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint32_t>(b, kv_type_offset(b, l, "general.name"), 99); },
       ErrorCode::kCorruptFile, "key general.name has unknown value type 99"},
      {"huge array length", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint64_t>(b, kv_value_offset(b, l, "tokenizer.ggml.tokens") + 4, 1ull << 50); },
       ErrorCode::kTruncatedFile, "tokenizer.ggml.tokens"},
      {"huge string length", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint64_t>(b, kv_value_offset(b, l, "tokenizer.chat_template"), 1ull << 33); },
       ErrorCode::kTruncatedFile, "tokenizer.chat_template"},
      {"bool value 2", nullptr,
       [](Bytes& b, const GgufLayout& l) { b[kv_value_offset(b, l, "tokenizer.ggml.add_bos_token")] = 2; },
       ErrorCode::kCorruptFile, "bool value 2"},
      {"duplicate key", nullptr,
       [](Bytes& b, const GgufLayout& l) {
         b[kv_type_offset(b, l, "tokenizer.ggml.bos_token_id") - 12] = 'e';  // bos_token_id -> eos_token_id
       },
       ErrorCode::kCorruptFile, "key tokenizer.ggml.eos_token_id appears twice"},
      {"alignment 3", [](TinyGguf& t) { t.writer.set_u32("general.alignment", 3); }, nullptr, ErrorCode::kCorruptFile,
       "general.alignment must be a power of two"},
      {"tensor with 5 dims", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint32_t>(b, tensor_info(b, l, "blk.0.attn_q.weight").n_dims, 5); },
       ErrorCode::kCorruptFile, "tensor blk.0.attn_q.weight has 5 dimensions"},
      {"tensor with 0 dims", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint32_t>(b, tensor_info(b, l, "output_norm.weight").n_dims, 0); },
       ErrorCode::kCorruptFile, "tensor output_norm.weight has 0 dimensions"},
      {"element count overflow", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint64_t>(b, tensor_info(b, l, "blk.1.ffn_up.weight").ne0 + 8, 1ull << 62); },
       ErrorCode::kCorruptFile, "blk.1.ffn_up.weight: element count overflows"},
      {"tensor past end of file", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint64_t>(b, tensor_info(b, l, "blk.1.ffn_up.weight").ne0 + 8, 1ull << 40); },
       ErrorCode::kTruncatedFile, "tensor blk.1.ffn_up.weight data"},
      {"offset past end of file", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint64_t>(b, tensor_info(b, l, "output.weight").offset, 1ull << 63); },
       ErrorCode::kTruncatedFile, "tensor output.weight data"},
      {"misaligned offset", nullptr,
       [](Bytes& b, const GgufLayout& l) {
         const size_t at = tensor_info(b, l, "blk.0.attn_v.weight").offset;
         put<uint64_t>(b, at, get_u64(b, at) + 4);
       },
       ErrorCode::kCorruptFile, "tensor blk.0.attn_v.weight: data offset"},
      {"unknown ggml type", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint32_t>(b, tensor_info(b, l, "blk.0.attn_q.weight").type, 99); },
       ErrorCode::kUnsupported, "tensor blk.0.attn_q.weight has unknown ggml type 99"},
      {"unsupported dtype q8_1", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint32_t>(b, tensor_info(b, l, "blk.0.attn_q.weight").type, 9); },
       ErrorCode::kUnsupported, "tensor blk.0.attn_q.weight has type q8_1, which is not supported"},
      {"unsupported dtype names the supported list", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint32_t>(b, tensor_info(b, l, "blk.0.attn_q.weight").type, 9); },
       ErrorCode::kUnsupported,
       "not supported (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs)"},
      {"row not a multiple of the block", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint32_t>(b, tensor_info(b, l, "blk.0.attn_q.weight").type, 12); },
       ErrorCode::kCorruptFile, "blk.0.attn_q.weight: row length 32 is not a multiple of the q4_K block size 256"},
      {"shape mismatch vs config", nullptr,
       [](Bytes& b, const GgufLayout& l) { put<uint64_t>(b, tensor_info(b, l, "blk.0.attn_k.weight").ne0 + 8, 8); },
       ErrorCode::kCorruptFile, "tensor blk.0.attn_k.weight has shape [8, 32], expected [16, 32]"},
      {"missing tensor", nullptr,
       [](Bytes& b, const GgufLayout& l) { b[tensor_info(b, l, "blk.0.ffn_up.weight").name + 10] = 'q'; },
       ErrorCode::kCorruptFile, "missing tensor blk.0.ffn_up.weight"},
      {"duplicate tensor", nullptr,
       [](Bytes& b, const GgufLayout& l) { b[tensor_info(b, l, "blk.1.ffn_up.weight").name + 4] = '0'; },
       ErrorCode::kCorruptFile, "tensor blk.0.ffn_up.weight appears twice"},
      {"missing key", [](TinyGguf& t) { t.writer.erase("llama.embedding_length"); }, nullptr, ErrorCode::kCorruptFile,
       "key llama.embedding_length is missing"},
      {"missing architecture", [](TinyGguf& t) { t.writer.erase("general.architecture"); }, nullptr,
       ErrorCode::kCorruptFile, "general.architecture is missing"},
      {"key of the wrong type", [](TinyGguf& t) { t.writer.set_string("llama.block_count", "2"); }, nullptr,
       ErrorCode::kCorruptFile, "llama.block_count has type string, expected an integer"},
      {"unsupported architecture", [](TinyGguf& t) { t.writer.set_string("general.architecture", "gpt2"); }, nullptr,
       ErrorCode::kUnsupported, "architecture 'gpt2' is not supported"},
      {"heads do not divide dim", [](TinyGguf& t) { t.writer.set_u32("llama.attention.head_count", 3); }, nullptr,
       ErrorCode::kCorruptFile, "llama.embedding_length"},
      {"kv heads do not divide heads", [](TinyGguf& t) { t.writer.set_u32("llama.attention.head_count_kv", 3); },
       nullptr, ErrorCode::kCorruptFile, "n_heads = 4 is not a multiple of n_kv_heads = 3"},
      {"zero layers", [](TinyGguf& t) { t.writer.set_u32("llama.block_count", 0); }, nullptr, ErrorCode::kCorruptFile,
       "n_layers = 0"},
      {"value over 32 bits", [](TinyGguf& t) { t.writer.set_u64("llama.context_length", 1ull << 40); }, nullptr,
       ErrorCode::kCorruptFile, "llama.context_length = 1099511627776 does not fit in 32 bits"},
      {"scores count mismatch", [](TinyGguf& t) { t.writer.set_f32_array("tokenizer.ggml.scores", {1, 2, 3}); },
       nullptr, ErrorCode::kCorruptFile, "tokenizer.ggml.scores has 3 entries for 48 tokens"},
      {"token types are strings", [](TinyGguf& t) { t.writer.set_string_array("tokenizer.ggml.token_type", {"a"}); },
       nullptr, ErrorCode::kCorruptFile, "tokenizer.ggml.token_type has type array of string"},
      {"bos id out of range", [](TinyGguf& t) { t.writer.set_u32("tokenizer.ggml.bos_token_id", 999); }, nullptr,
       ErrorCode::kCorruptFile, "tokenizer.ggml.bos_token_id = 999 is not a token id"},
      {"more tokens than embedding rows",
       [](TinyGguf& t) {
         t.writer.set_string_array("tokenizer.ggml.tokens", std::vector<std::string>(60, "x"));
         t.writer.erase("tokenizer.ggml.scores");
         t.writer.erase("tokenizer.ggml.token_type");
       },
       nullptr, ErrorCode::kCorruptFile, "tokenizer.ggml.tokens has 60 tokens but token_embd.weight only 48 rows"},
      {"arrays nested too deep",
       [](TinyGguf& t) {
         loaders::GgufValue v;
         v.type = loaders::GgufType::kArray;
         v.elem = loaders::GgufType::kU8;
         v.ints = {1};
         for (int i = 0; i < 5; ++i) {
           loaders::GgufValue outer;
           outer.type = loaders::GgufType::kArray;
           outer.elem = loaders::GgufType::kArray;
           outer.arrays = {v};
           v = outer;
         }
         t.writer.set_value("test.nested", v);
       },
       nullptr, ErrorCode::kCorruptFile, "arrays nested deeper than 4"},
  };
}

TEST(MalformedGguf, TinyModelLoadsWhenIntact) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    auto r = load_bytes(
        fuzz::tiny_gguf({.architecture = "llama", .matrix_dtype = dt, .with_vocab = true, .alignment = 0}).serialize());
    ASSERT_TRUE(r.ok()) << dtype_name(dt) << ": " << r.error().to_string();
    EXPECT_EQ((*r)->layers[1].w_down.dtype, dt);
    EXPECT_EQ((*r)->layers[1].ffn_norm.dtype, DType::kF32);
    EXPECT_EQ((*r)->vocab.chat_template, "{{ messages }}");
  }
  auto q = load_bytes(
      fuzz::tiny_gguf({.architecture = "qwen2", .matrix_dtype = DType::kF16, .with_vocab = false, .alignment = 0})
          .serialize());
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_EQ((*q)->config().rope_layout, RopeLayout::kHalves);
  EXPECT_TRUE((*q)->config().attn_bias);
  EXPECT_EQ((*q)->layers[0].bk.cols, 16);
  EXPECT_TRUE((*q)->vocab.tokens.empty());

  // general.alignment = 64 moves the data section and every tensor to multiples of 64.
  GgufLayout layout;
  const Bytes aligned =
      fuzz::tiny_gguf({.architecture = "llama", .matrix_dtype = DType::kQ8_0, .with_vocab = true, .alignment = 64})
          .serialize(&layout);
  EXPECT_EQ(layout.data_offset % 64, 0u);
  auto a = load_bytes(aligned);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ((reinterpret_cast<uintptr_t>((*a)->layers[1].wq.data) - reinterpret_cast<uintptr_t>((*a)->tok_embeddings.data)) % 64, 0u);

  // GGUF v2 has the same layout as v3 and loads too.
  Bytes v2 = fuzz::tiny_gguf().serialize();
  put<uint32_t>(v2, 4, 2);
  auto r2 = load_bytes(v2);
  ASSERT_TRUE(r2.ok()) << r2.error().to_string();
  EXPECT_EQ((*r2)->config().n_layers, fuzz::kTinyLayers);
}

TEST(MalformedGguf, EachCorruptionGivesANamedError) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    fuzz::TinyGguf t = fuzz::tiny_gguf();
    if (c.edit_writer) c.edit_writer(t);
    GgufLayout layout;
    Bytes b = t.serialize(&layout);
    if (c.edit_bytes) c.edit_bytes(b, layout);
    auto r = load_bytes(b);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, c.code) << r.error().to_string();
    EXPECT_EQ(r.error().message.rfind("crafted.gguf: ", 0), 0u) << r.error().message;
    EXPECT_NE(r.error().message.find(c.message_part), std::string::npos) << r.error().message;
  }
}

// Every prefix of the real file is a truncated file, reported as such.
TEST(MalformedGguf, TruncatedRealFileAtManyOffsets) {
  const std::string path = testing::shared_path("models/stories260K/stories260K.gguf");
  std::ifstream in(path, std::ios::binary);
  const Bytes full((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto fb = loaders::FileBytes::copy_of(full.data(), full.size(), "x");
  auto g = loaders::parse_gguf(*fb);
  ASSERT_TRUE(g.ok());
  std::vector<size_t> cuts;
  for (size_t i = 0; i <= 64; ++i) cuts.push_back(i);
  for (size_t i = 65; i < g->data_offset; i += 97) cuts.push_back(i);  // metadata and tensor infos
  for (size_t d : {size_t{1}, size_t{31}}) cuts.push_back(g->data_offset - d);
  cuts.push_back(g->data_offset);
  for (size_t i = g->data_offset + 1; i < full.size(); i += 40009) cuts.push_back(i);  // inside tensor data
  cuts.push_back(full.size() - 1);
  for (size_t cut : cuts) {
    const Bytes part(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(cut));
    auto r = load_bytes(part, "cut.gguf");
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    EXPECT_EQ(r.error().code, ErrorCode::kTruncatedFile) << "cut at " << cut << ": " << r.error().to_string();
    EXPECT_EQ(r.error().message.rfind("cut.gguf: ", 0), 0u) << r.error().message;
  }
  EXPECT_GT(cuts.size(), 100u);
}

}  // namespace
}  // namespace tessera::worker
