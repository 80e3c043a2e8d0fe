#include "seeds.h"

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "gguf.h"
#include "half.h"
#include "synth.h"

namespace tessera::fuzz {
namespace {

using loaders::ggml_from_dtype;

std::vector<float> values(size_t n, float center, float scale, uint32_t salt) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = center + scale * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(salt));
  return v;
}

std::vector<uint8_t> encode(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> out;
  switch (t) {
    case DType::kF32:
      out.resize(v.size() * 4);
      std::memcpy(out.data(), v.data(), out.size());
      break;
    case DType::kF16:
    case DType::kBF16:
      out.resize(v.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t h = t == DType::kF16 ? loaders::f32_to_fp16(v[i]) : loaders::f32_to_bf16(v[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case DType::kQ8_0:
      out.resize(v.size() / 32 * 34);
      loaders::quantize_q8_0(v.data(), static_cast<int64_t>(v.size()), out.data());
      break;
    case DType::kQ4_0:
      out.assign(v.size() / 32 * 18, 0x88);  // every nibble 8 -> value 0; scale 0
      for (size_t b = 0; b < v.size() / 32; ++b) out[b * 18] = out[b * 18 + 1] = 0;
      break;
    default:  // the other blocked types: all-zero blocks (scale 0, every value 0)
      out.assign(dtype_row_bytes(t, static_cast<int64_t>(v.size())), 0);
      break;
  }
  return out;
}

struct Planned {
  std::string name;
  std::vector<int64_t> shape;  // outermost first
  int kind;                    // 0 matrix, 1 norm, 2 bias
};

std::vector<Planned> plan(bool biases) {
  const int64_t d = kTinyDim, h = kTinyHidden, hd = kTinyDim / kTinyHeads, kv = kTinyKvHeads * hd;
  std::vector<Planned> p = {{"token_embd.weight", {kTinyVocab, d}, 0}};
  for (int l = 0; l < kTinyLayers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    p.push_back({b + "attn_norm.weight", {d}, 1});
    p.push_back({b + "attn_q.weight", {d, d}, 0});
    p.push_back({b + "attn_k.weight", {kv, d}, 0});
    p.push_back({b + "attn_v.weight", {kv, d}, 0});
    if (biases) {
      p.push_back({b + "attn_q.bias", {d}, 2});
      p.push_back({b + "attn_k.bias", {kv}, 2});
      p.push_back({b + "attn_v.bias", {kv}, 2});
    }
    p.push_back({b + "attn_output.weight", {d, d}, 0});
    p.push_back({b + "ffn_norm.weight", {d}, 1});
    p.push_back({b + "ffn_gate.weight", {h, d}, 0});
    p.push_back({b + "ffn_up.weight", {h, d}, 0});
    p.push_back({b + "ffn_down.weight", {d, h}, 0});
  }
  p.push_back({"output_norm.weight", {d}, 1});
  p.push_back({"output.weight", {kTinyVocab, d}, 0});
  return p;
}

// GGUF name -> HF name.
std::string hf_name(const std::string& g) {
  static const std::map<std::string, std::string> kTop = {{"token_embd.weight", "model.embed_tokens.weight"},
                                                          {"output_norm.weight", "model.norm.weight"},
                                                          {"output.weight", "lm_head.weight"}};
  if (auto it = kTop.find(g); it != kTop.end()) return it->second;
  static const std::map<std::string, std::string> kLayer = {
      {"attn_norm.weight", "input_layernorm.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},   {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},   {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},       {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},       {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},        {"ffn_down.weight", "mlp.down_proj.weight"}};
  const size_t second_dot = g.find('.', 4);
  return "model.layers." + g.substr(4, second_dot - 4) + "." + kLayer.at(g.substr(second_dot + 1));
}

}  // namespace

TinyGguf tiny_gguf(const TinyModel& o) {
  TinyGguf t;
  auto& w = t.writer;
  if (o.alignment != 0) w.set_alignment(o.alignment);
  const std::string a = o.architecture + ".";
  w.set_string("general.architecture", o.architecture);
  w.set_string("general.name", "tiny");
  w.set_u32(a + "context_length", kTinyContext);
  w.set_u32(a + "embedding_length", kTinyDim);
  w.set_u32(a + "block_count", kTinyLayers);
  w.set_u32(a + "feed_forward_length", kTinyHidden);
  w.set_u32(a + "rope.dimension_count", kTinyDim / kTinyHeads);
  w.set_u32(a + "attention.head_count", kTinyHeads);
  w.set_u32(a + "attention.head_count_kv", kTinyKvHeads);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_f32(a + "rope.freq_base", 10000.0f);
  if (o.with_vocab) {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};
    for (int i = 3; i < kTinyVocab; ++i) {
      tokens.push_back(i % 2 ? "\xE2\x96\x81" + std::string(1, static_cast<char>('a' + i / 2)) : std::string(1, static_cast<char>('a' + i / 2)));
      types.push_back(1);
    }
    std::vector<float> scores(tokens.size());
    for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_f32_array("tokenizer.ggml.scores", scores);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_string("tokenizer.chat_template", "{{ messages }}");
  }
  uint32_t salt = 0;
  for (const Planned& p : plan(o.architecture == "qwen2")) {
    const DType dt = p.kind == 0 ? o.matrix_dtype : DType::kF32;
    std::vector<uint64_t> ne(p.shape.rbegin(), p.shape.rend());
    w.add_tensor(p.name, ggml_from_dtype(dt), ne);
    size_t n = 1;
    for (int64_t s : p.shape) n *= static_cast<size_t>(s);
    t.data.push_back(encode(values(n, p.kind == 1 ? 1.0f : 0.0f, 0.05f, salt++), dt));
  }
  return t;
}

std::vector<uint8_t> tiny_safetensors(const std::string& dtype) {
  const DType dt = dtype == "F16" ? DType::kF16 : dtype == "BF16" ? DType::kBF16 : DType::kF32;
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  std::vector<uint8_t> data;
  uint32_t salt = 0;
  for (const Planned& p : plan(false)) {
    size_t n = 1;
    for (int64_t s : p.shape) n *= static_cast<size_t>(s);
    const std::vector<uint8_t> bytes = encode(values(n, p.kind == 1 ? 1.0f : 0.0f, 0.05f, salt++), dt);
    header[hf_name(p.name)] = {{"dtype", dtype}, {"shape", p.shape}, {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data.insert(data.end(), bytes.begin(), bytes.end());
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  const uint64_t len = h.size();
  std::vector<uint8_t> out(8 + h.size() + data.size());
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, h.data(), h.size());
  std::memcpy(out.data() + 8 + h.size(), data.data(), data.size());
  return out;
}

std::string tiny_config_json(const std::string& model_type) {
  return nlohmann::json{{"model_type", model_type},
                        {"hidden_size", kTinyDim},
                        {"intermediate_size", kTinyHidden},
                        {"num_hidden_layers", kTinyLayers},
                        {"num_attention_heads", kTinyHeads},
                        {"num_key_value_heads", kTinyKvHeads},
                        {"vocab_size", kTinyVocab},
                        {"max_position_embeddings", kTinyContext},
                        {"rms_norm_eps", 1e-5},
                        {"rope_theta", 10000.0},
                        {"tie_word_embeddings", false}}
      .dump();
}

std::vector<std::vector<uint8_t>> crafted_seeds(const std::string& kind) {
  std::vector<std::vector<uint8_t>> out;
  if (kind == "gguf") {
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      out.push_back(tiny_gguf({.architecture = "llama", .matrix_dtype = dt, .with_vocab = true, .alignment = 0}).serialize());
    }
    out.push_back(tiny_gguf({.architecture = "qwen2", .matrix_dtype = DType::kF16, .with_vocab = false, .alignment = 0})
                      .serialize());
    out.push_back(tiny_gguf({.architecture = "llama", .matrix_dtype = DType::kQ8_0, .with_vocab = true, .alignment = 64})
                      .serialize());
  } else {
    for (const char* dt : {"F32", "F16", "BF16"}) out.push_back(tiny_safetensors(dt));
  }
  return out;
}

}  // namespace tessera::fuzz
