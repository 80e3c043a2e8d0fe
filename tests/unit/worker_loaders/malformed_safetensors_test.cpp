// Malformed safetensors files and Hugging Face directories: each gives a Result error with
// the right code and a message naming the file and the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "loaded_model.h"
#include "safetensors_writer.h"
#include "seeds.h"
#include "tessera/testing/paths.h"

namespace tessera::worker {
namespace {

using Bytes = std::vector<uint8_t>;
using nlohmann::json;

Result<std::unique_ptr<Model>> load_st(const Bytes& b, const std::string& config = fuzz::tiny_config_json()) {
  return loaders::load_hf_from("dir", config, {loaders::FileBytes::copy_of(b.data(), b.size(), "dir/model.safetensors")});
}

// Rewrites the JSON header of a safetensors file, keeping its data bytes.
Bytes with_header(const Bytes& file, const std::function<void(json&)>& edit) {
  uint64_t len;
  std::memcpy(&len, file.data(), 8);
  json h = json::parse(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(len));
  edit(h);
  const std::string text = h.dump();
  const size_t data = file.size() - 8 - len;
  Bytes out(8 + text.size() + data);
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  std::memcpy(out.data() + 8 + text.size(), file.data() + 8 + len, data);
  return out;
}

Bytes raw_header(const std::string& text, size_t data_bytes = 0) {
  Bytes out;
  out.reserve(8 + text.size() + data_bytes);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i)));
  for (char c : text) out.push_back(static_cast<uint8_t>(c));
  out.resize(out.size() + data_bytes, 0);
  return out;
}

const char* kEmbed = "model.embed_tokens.weight";

struct Case {
  const char* name;
  std::function<Bytes()> file;
  std::string config;  // "" = the tiny config
  ErrorCode code;
  const char* message_part;
};

std::vector<Case> cases() {
  const Bytes good = fuzz::tiny_safetensors("F32");
  auto header = [good](std::function<void(json&)> f) { return [good, f] { return with_header(good, f); }; };
  auto config_with = [](const char* key, json value) {
    json c = json::parse(fuzz::tiny_config_json());
    if (value.is_null()) {
      c.erase(key);
    } else {
      c[key] = value;
    }
    return c.dump();
  };
  return {
      {"shorter than the length field", [] { return Bytes{1, 2, 3}; }, "", ErrorCode::kTruncatedFile, "no header length"},
      {"header over 100 MiB", [] { Bytes b(16, 0); b[5] = 0x10; return b; }, "", ErrorCode::kCorruptFile,
       "exceeds the 100 MiB limit"},
      {"header past end of file", [good] { Bytes b = good; b.resize(100); return b; }, "", ErrorCode::kTruncatedFile,
       "runs past the end of the file"},
      {"header not JSON", [] { return raw_header("{\"a\": [1, 2,"); }, "", ErrorCode::kCorruptFile, "not valid JSON"},
      {"header not an object", [] { return raw_header("[1, 2]"); }, "", ErrorCode::kCorruptFile, "not a JSON object"},
      {"tensor entry not an object", [] { return raw_header(R"({"x": 3})"); }, "", ErrorCode::kCorruptFile,
       "tensor x is not an object"},
      {"unknown dtype", header([](json& h) { h[kEmbed]["dtype"] = "F7"; }), "", ErrorCode::kUnsupported,
       "unknown dtype 'F7'"},
      {"dtype not supported for a weight",
       header([](json& h) { h[kEmbed]["dtype"] = "I64"; h[kEmbed]["shape"] = {48, 16}; }), "", ErrorCode::kUnsupported,
       "model.embed_tokens.weight has dtype I64, which is not supported"},
      {"reversed offsets", header([](json& h) { h[kEmbed]["data_offsets"] = {10, 2}; }), "", ErrorCode::kCorruptFile,
       "are reversed"},
      {"offsets past the data", header([](json& h) { h[kEmbed]["data_offsets"] = {0, 1u << 30}; }), "",
       ErrorCode::kTruncatedFile, "past the"},
      {"size does not match shape", header([](json& h) { h[kEmbed]["shape"] = {48, 31}; }), "", ErrorCode::kCorruptFile,
       "model.embed_tokens.weight occupies 6144 bytes but its shape and dtype F32 need 5952"},
      {"negative dimension", header([](json& h) { h[kEmbed]["shape"] = {-48, 32}; }), "", ErrorCode::kCorruptFile,
       "shape entry is not a non-negative integer"},
      {"overflowing shape", header([](json& h) { h[kEmbed]["shape"] = {1ull << 62, 1ull << 62}; }), "",
       ErrorCode::kCorruptFile, "element count overflows"},
      {"missing tensor", header([](json& h) { h.erase("model.layers.1.mlp.down_proj.weight"); }), "",
       ErrorCode::kCorruptFile, "missing tensor blk.1.ffn_down.weight"},
      {"shape mismatch vs config", [good] { return good; }, config_with("vocab_size", 50), ErrorCode::kCorruptFile,
       "model.embed_tokens.weight (dir/model.safetensors) has shape [48, 32], expected [50, 32]"},
      {"config not JSON", [good] { return good; }, "{\"model_type\": ", ErrorCode::kCorruptFile,
       "dir/config.json: not valid JSON"},
      {"config missing key", [good] { return good; }, config_with("hidden_size", nullptr), ErrorCode::kCorruptFile,
       "key hidden_size is missing"},
      {"config key of the wrong type", [good] { return good; }, config_with("num_hidden_layers", "2"),
       ErrorCode::kCorruptFile, "key num_hidden_layers is not an integer"},
      {"unsupported model type", [good] { return good; }, config_with("model_type", "gpt2"), ErrorCode::kUnsupported,
       "model_type 'gpt2' is not supported"},
      {"zero heads", [good] { return good; }, config_with("num_attention_heads", 0), ErrorCode::kCorruptFile,
       "num_attention_heads is 0"},
  };
}

TEST(MalformedSafetensors, TinyModelLoadsWhenIntact) {
  for (const char* dt : {"F32", "F16", "BF16"}) {
    auto r = load_st(fuzz::tiny_safetensors(dt));
    ASSERT_TRUE(r.ok()) << dt << ": " << r.error().to_string();
    EXPECT_EQ((*r)->config().dim, fuzz::kTinyDim);
    EXPECT_FALSE((*r)->config().tied_embeddings);
  }
}

TEST(MalformedSafetensors, EachCorruptionGivesANamedError) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto r = c.config.empty() ? load_st(c.file()) : load_st(c.file(), c.config);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, c.code) << r.error().to_string();
    EXPECT_EQ(r.error().message.rfind("dir", 0), 0u) << r.error().message;
    EXPECT_NE(r.error().message.find(c.message_part), std::string::npos) << r.error().message;
  }
}

TEST(MalformedSafetensors, TruncatedAtEveryHeaderByteAndInData) {
  const Bytes good = fuzz::tiny_safetensors("F16");
  uint64_t len;
  std::memcpy(&len, good.data(), 8);
  for (size_t cut = 0; cut < good.size(); cut += (cut < 8 + len ? 1 : 257)) {
    auto r = load_st(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)));
    ASSERT_FALSE(r.ok()) << cut;
    // Before the end of the header the header length runs past the end of the file; after
    // it, the first tensor whose data_offsets reach past the end is named.
    EXPECT_EQ(r.error().code, ErrorCode::kTruncatedFile) << cut << ": " << r.error().to_string();
    EXPECT_NE(r.error().message.find(cut < 8 ? "no header length" : cut < 8 + len ? "runs past the end" : "data ends at"),
              std::string::npos)
        << cut << ": " << r.error().message;
  }
}

TEST(MalformedHfDirectory, FilesAndIndex) {
  const std::string dir = testing::make_temp_dir("tessera-hf-bad");
  auto code_of = [&](const char* part) {
    auto r = load_model(dir);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return ErrorCode::kOk;
    EXPECT_NE(r.error().message.find(part), std::string::npos) << r.error().message;
    return r.error().code;
  };
  EXPECT_EQ(code_of("config.json: cannot open"), ErrorCode::kIoError);
  testutil::write_text(dir + "/config.json", fuzz::tiny_config_json());
  EXPECT_EQ(code_of("neither model.safetensors nor model.safetensors.index.json"), ErrorCode::kIoError);
  testutil::write_text(dir + "/model.safetensors.index.json", R"({"weight_map": {"x": "../../etc/passwd"}})");
  EXPECT_EQ(code_of("names a file outside the directory"), ErrorCode::kCorruptFile);
  testutil::write_text(dir + "/model.safetensors.index.json", R"({"weight_map": {"x": "model-00001-of-00002.safetensors"}})");
  EXPECT_EQ(code_of("model-00001-of-00002.safetensors: cannot open"), ErrorCode::kIoError);
  testutil::write_text(dir + "/model.safetensors.index.json", R"({"weight_map": 3})");
  EXPECT_EQ(code_of("weight_map is missing or not an object"), ErrorCode::kCorruptFile);
  // The same tensor in two shards.
  const Bytes good = fuzz::tiny_safetensors("F32");
  testutil::write_bytes(dir + "/a.safetensors", good);
  testutil::write_bytes(dir + "/b.safetensors", good);
  testutil::write_text(dir + "/model.safetensors.index.json", R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})");
  EXPECT_EQ(code_of("appears in more than one shard"), ErrorCode::kCorruptFile);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::worker
