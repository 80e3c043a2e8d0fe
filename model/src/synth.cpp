#include "synth.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>

#include "gguf_writer.h"
#include "half.h"
#include "tessera/common/quants.h"

namespace tessera::loaders {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

struct Vocab {
  std::string model, pre;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  int32_t bos = -1, eos = -1, unk = -1;
};

// <unk>, <s>, </s>, 256 byte tokens, then "▁", then every string over a frequency-ordered
// alphabet by increasing length, each with and without the "▁" word prefix. Every prefix of
// a piece is a piece, so SentencePiece BPE merges can build them all.
Vocab synthetic_spm_vocab(int32_t n) {
  Vocab v;
  v.model = "llama";
  v.pre = "default";
  v.bos = 1;
  v.eos = 2;
  v.unk = 0;
  auto add = [&](std::string piece, int32_t type) {
    v.scores.push_back(type == 1 ? -static_cast<float>(v.tokens.size()) : 0.0f);
    v.tokens.push_back(std::move(piece));
    v.types.push_back(type);
  };
  add("<unk>", 2);
  add("<s>", 3);
  add("</s>", 3);
  for (int b = 0; b < 256 && static_cast<int32_t>(v.tokens.size()) < n; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 6);
  }
  const std::string space = "\xE2\x96\x81";
  if (static_cast<int32_t>(v.tokens.size()) < n) add(space, 1);
  static const std::string kAlphabet = "etaoinshrdlucmfwypvbgkjqxz";
  std::vector<std::string> level = {""};
  while (static_cast<int32_t>(v.tokens.size()) < n) {
    std::vector<std::string> next;
    for (const std::string& s : level) {
      for (char c : kAlphabet) next.push_back(s + c);
    }
    for (const std::string& s : next) {
      if (static_cast<int32_t>(v.tokens.size()) >= n) break;
      add(space + s, 1);
      if (static_cast<int32_t>(v.tokens.size()) >= n) break;
      add(s, 1);
    }
    level = std::move(next);
  }
  return v;
}

Result<nlohmann::json> read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIoError, path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(ErrorCode::kCorruptFile, path + ": not a JSON object");
  return j;
}

// A Hugging Face tokenizer.json byte-level BPE vocabulary as a GGUF "gpt2" vocab, padded with
// reserved control tokens up to n. bos/eos come from a config.json beside it, if any.
Result<Vocab> hf_vocab(const std::string& path, int32_t n, const std::string& pre) {
  TS_ASSIGN_OR_RETURN(nlohmann::json j, read_json_file(path));
  auto model = j.find("model");
  if (model == j.end() || !model->is_object() || model->value("type", "") != "BPE" || !model->contains("vocab") ||
      !(*model)["vocab"].is_object()) {
    return make_error(ErrorCode::kCorruptFile, path + ": model is not a BPE model with a vocab object");
  }
  Vocab v;
  v.model = "gpt2";
  v.pre = pre;
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int32_t> types(static_cast<size_t>(n), 0);
  auto place = [&](const std::string& tok, const nlohmann::json& id, int32_t type) -> Status {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      return make_error(ErrorCode::kCorruptFile, path + ": token '" + tok + "' has no valid id");
    }
    if (id.get<int64_t>() >= n) {
      return make_error(ErrorCode::kOutOfRange, path + ": token id " + std::to_string(id.get<int64_t>()) +
                                                    " does not fit the model's vocabulary of " + std::to_string(n));
    }
    tokens[static_cast<size_t>(id.get<int64_t>())] = tok;
    types[static_cast<size_t>(id.get<int64_t>())] = type;
    return ok_status();
  };
  for (const auto& [tok, id] : (*model)["vocab"].items()) TS_TRY(place(tok, id, 1));
  if (auto added = j.find("added_tokens"); added != j.end() && added->is_array()) {
    for (const auto& t : *added) {
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id")) continue;
      TS_TRY(place(t["content"].get<std::string>(), t["id"], t.value("special", false) ? 3 : 4));
    }
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == 0) {
      tokens[i] = "<|reserved_" + std::to_string(i) + "|>";
      types[i] = 3;
    }
  }
  if (auto merges = model->find("merges"); merges != model->end() && merges->is_array()) {
    for (const auto& m : *merges) {
      if (m.is_string()) {
        v.merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      }
    }
  }
  v.tokens = std::move(tokens);
  v.types = std::move(types);
  const std::string config = (std::filesystem::path(path).parent_path() / "config.json").string();
  std::error_code ec;
  if (std::filesystem::exists(config, ec)) {
    TS_ASSIGN_OR_RETURN(nlohmann::json c, read_json_file(config));
    if (c.contains("bos_token_id") && c["bos_token_id"].is_number_integer()) v.bos = c["bos_token_id"].get<int32_t>();
    if (c.contains("eos_token_id") && c["eos_token_id"].is_number_integer()) v.eos = c["eos_token_id"].get<int32_t>();
  }
  return v;
}

// general.file_type: llama.cpp's LLAMA_FTYPE_* of the file's predominant type or mix.
uint32_t file_type(DType t, SynthMix mix) {
  switch (mix) {
    case SynthMix::kQ3_K_M: return 12;
    case SynthMix::kQ4_K_S: return 14;
    case SynthMix::kQ4_K_M: return 15;
    case SynthMix::kQ5_K_M: return 17;
    case SynthMix::kPure: break;
  }
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 11;  // Q3_K_S
    case DType::kQ4_K: return 14;  // Q4_K_S
    case DType::kQ5_K: return 16;  // Q5_K_S
    case DType::kQ6_K: return 18;
    case DType::kIQ4_NL: return 25;
    case DType::kIQ4_XS: return 30;
    case DType::kBF16: return 32;
  }
  return 0;
}

struct PlannedTensor {
  std::string name;
  std::vector<uint64_t> ne;
  int kind;  // 0 matrix, 1 norm, 2 bias, 3 rope_freqs, 4 / 5 LongRoPE long / short factors
  DType dtype;
};

}  // namespace

void synth_values(uint64_t seed, const std::string& name, int kind, size_t n, float* out, float std_dev) {
  const uint64_t base = splitmix64(seed ^ name_hash(name));
  const float half_width = kind == 1 ? 0.05f : (kind == 0 ? std_dev : 0.02f) * std::sqrt(3.0f);
  const float center = kind == 1 ? 1.0f : 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = splitmix64(base + i);
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    out[i] = center + (2.0f * u - 1.0f) * half_width;
  }
}

std::vector<float> llama3_rope_factors(float theta, int32_t head_dim, float factor, double low_freq_factor,
                                       double high_freq_factor, double old_context) {
  const double kLow = low_freq_factor, kHigh = high_freq_factor, kOld = old_context;
  const double low_wavelen = kOld / kLow, high_wavelen = kOld / kHigh;
  std::vector<float> out;
  for (int32_t i = 0; i < head_dim; i += 2) {
    // torch: 1.0 / (base ** (arange(0, dim, 2, float32) / dim)), in float32
    const float freq = 1.0f / std::pow(theta, static_cast<float>(i) / static_cast<float>(head_dim));
    const double wavelen = 2.0 * std::numbers::pi / static_cast<double>(freq);
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(factor);
    } else {
      const double smooth = (kOld / wavelen - kLow) / (kHigh - kLow);
      out.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return out;
}

void quantize_q8_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t* ob = out + b * 34;
    const uint16_t dh = f32_to_fp16(d);
    std::memcpy(ob, &dh, 2);
    for (int j = 0; j < 32; ++j) ob[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(xb[j] * id)));
  }
}

}  // namespace tessera::loaders

namespace tessera {

namespace {

struct MixName {
  const char* name;
  SynthMix mix;
  DType base;
};
constexpr MixName kMixes[] = {{"q3_k_m", SynthMix::kQ3_K_M, DType::kQ3_K},
                              {"q4_k_s", SynthMix::kQ4_K_S, DType::kQ4_K},
                              {"q4_k_m", SynthMix::kQ4_K_M, DType::kQ4_K},
                              {"q5_k_m", SynthMix::kQ5_K_M, DType::kQ5_K}};

// llama.cpp's fallback for a row length its type's block does not divide.
DType fallback(DType t) {
  switch (t) {
    case DType::kQ4_K: return DType::kQ5_0;
    case DType::kQ5_K: return DType::kQ5_1;
    case DType::kQ6_K: return DType::kQ8_0;
    case DType::kQ2_K: case DType::kQ3_K: case DType::kIQ4_XS: return DType::kIQ4_NL;
    default: return DType::kF32;
  }
}

// The layer index of "blk.<i>.<...>", or -1.
int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

}  // namespace

std::vector<std::string> synth_dtype_names() {
  std::vector<std::string> out;
  for (int i = 0; i < kDTypeCount; ++i) out.emplace_back(dtype_name(static_cast<DType>(i)));
  for (const MixName& m : kMixes) out.emplace_back(m.name);
  return out;
}

Status parse_synth_dtype(const std::string& name, SynthOptions* o) {
  for (int i = 0; i < kDTypeCount; ++i) {
    if (name == dtype_name(static_cast<DType>(i))) {
      o->dtype = static_cast<DType>(i);
      o->mix = SynthMix::kPure;
      return {};
    }
  }
  for (const MixName& m : kMixes) {
    if (name == m.name) {
      o->dtype = m.base;
      o->mix = m.mix;
      return {};
    }
  }
  std::string names;
  for (const std::string& n : synth_dtype_names()) names += (names.empty() ? "" : ", ") + n;
  return make_error(ErrorCode::kInvalidArgument, "synth dtype '" + name + "' is not known (" + names + ")");
}

DType synth_tensor_type(const SynthOptions& o, const SynthShape& shape, const std::string& name, uint64_t cols) {
  DType t = o.dtype;
  if (o.mix != SynthMix::kPure) {
    const int n = shape.n_layers, i = layer_of(name);
    const bool more_bits = i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;  // llama.cpp use_more_bits
    const bool is_output = name == "output.weight" || (shape.tied && name == "token_embd.weight");
    const bool attn_v = name.find("attn_v.weight") != std::string::npos;
    const bool ffn_down = name.find("ffn_down") != std::string::npos;
    const bool attn_out = name.find("attn_output.weight") != std::string::npos;
    const bool attn_qkv = name.find("attn_qkv.weight") != std::string::npos;
    const bool eight_experts = shape.n_experts == 8;
    if (is_output) {
      t = cols % 256 == 0 ? DType::kQ6_K : DType::kQ8_0;
    } else if (eight_experts && (attn_v || name.find("attn_k.weight") != std::string::npos)) {
      t = DType::kQ8_0;  // llama.cpp: "for the 8-expert model, bumping this to Q8_0 trades just ~128MB"
    } else if (eight_experts && attn_out && o.mix != SynthMix::kQ5_K_M) {
      t = DType::kQ5_K;
    } else if (attn_qkv) {  // llama.cpp: Q3_K_M -> Q4_K, Q4_K_M -> Q5_K, Q5_K_M -> Q6_K
      if (o.mix == SynthMix::kQ3_K_M) t = DType::kQ4_K;
      if (o.mix == SynthMix::kQ4_K_M) t = DType::kQ5_K;
      if (o.mix == SynthMix::kQ5_K_M) t = DType::kQ6_K;
    } else if (o.mix == SynthMix::kQ4_K_M || o.mix == SynthMix::kQ5_K_M) {
      if ((attn_v || ffn_down) && more_bits) t = DType::kQ6_K;
    } else if (o.mix == SynthMix::kQ4_K_S) {
      if ((attn_v && i < 4) || (ffn_down && i < n / 8)) t = DType::kQ5_K;
    } else if (o.mix == SynthMix::kQ3_K_M) {
      if (attn_v) t = i < 2 ? DType::kQ5_K : DType::kQ4_K;
      if (ffn_down) t = i < n / 16 ? DType::kQ5_K : DType::kQ4_K;
      if (attn_out) t = DType::kQ4_K;
    }
  }
  // Q8_0 keeps its historical fallback (f32); the others fall back as llama.cpp does.
  if (cols % static_cast<uint64_t>(dtype_block_size(t)) != 0 && t != DType::kQ8_0) t = fallback(t);
  if (cols % static_cast<uint64_t>(dtype_block_size(t)) != 0) t = DType::kF32;
  return t;
}

Status synth_model(const SynthOptions& o) {
  using namespace loaders;  // NOLINT: this file's helpers
  TS_ASSIGN_OR_RETURN(SynthShape s, synth_shape(o.like));
  Vocab vocab;
  if (o.vocab_from.empty()) {
    vocab = synthetic_spm_vocab(s.vocab_size);
    if (s.architecture == "phi3") {  // llama.cpp looks this token up in any model named "phi3"
      vocab.tokens.back() = "<|endoftext|>";
      vocab.types.back() = 3;
      vocab.scores.back() = 0.0f;
    }
  } else {
    const std::string pre = s.family == "smollm2" ? "smollm" : s.family == "llama3" ? "llama-bpe"
                            : s.family == "qwen2" || s.family == "qwen2.5" || s.family == "qwen2moe" || s.family == "qwen3" ||
                                      s.family == "qwen3moe" ? "qwen2"
                                                                                     : "default";
    TS_ASSIGN_OR_RETURN(vocab, hf_vocab(o.vocab_from, s.vocab_size, pre));
  }

  const int32_t head_dim = s.head_size();
  const uint64_t dim = static_cast<uint64_t>(s.dim), hidden = static_cast<uint64_t>(s.hidden_dim);
  const uint64_t q_dim = static_cast<uint64_t>(s.n_heads) * static_cast<uint64_t>(head_dim);
  const uint64_t kv_dim = static_cast<uint64_t>(s.n_kv_heads) * static_cast<uint64_t>(head_dim);
  const bool phi3 = s.architecture == "phi3", gemma2 = s.architecture == "gemma2";
  const bool qwen3 = s.architecture == "qwen3" || s.architecture == "qwen3moe";
  const bool mla = s.kv_lora_rank > 0;  // deepseek2
  const uint64_t nope = static_cast<uint64_t>(head_dim - s.rope_dim), vd = static_cast<uint64_t>(s.v_head_dim);
  std::vector<PlannedTensor> plan;
  auto matrix = [&](const std::string& name, uint64_t cols, uint64_t rows) {
    plan.push_back({name, {cols, rows}, 0, synth_tensor_type(o, s, name, cols)});
  };
  auto experts = [&](const std::string& name, uint64_t cols, uint64_t rows, uint64_t n) {
    plan.push_back({name, {cols, rows, n}, 0, synth_tensor_type(o, s, name, cols)});
  };
  auto vec = [&](const std::string& name, uint64_t n, int kind) { plan.push_back({name, {n}, kind, DType::kF32}); };
  matrix("token_embd.weight", dim, static_cast<uint64_t>(s.vocab_size));
  if (s.llama3_rope_factor > 0.0f) vec("rope_freqs.weight", static_cast<uint64_t>(head_dim / 2), 3);
  if (s.longrope_orig_ctx > 0) {
    vec("rope_factors_long.weight", static_cast<uint64_t>(head_dim / 2), 4);
    vec("rope_factors_short.weight", static_cast<uint64_t>(head_dim / 2), 5);
  }
  for (int32_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", dim, 1);
    if (mla) {
      const auto lora = static_cast<uint64_t>(s.kv_lora_rank), ql = static_cast<uint64_t>(s.q_lora_rank);
      if (ql > 0) {
        matrix(p + "attn_q_a.weight", dim, ql);
        vec(p + "attn_q_a_norm.weight", ql, 1);
        matrix(p + "attn_q_b.weight", ql, q_dim);
      } else {
        matrix(p + "attn_q.weight", dim, q_dim);
      }
      matrix(p + "attn_kv_a_mqa.weight", dim, lora + static_cast<uint64_t>(s.rope_dim));
      vec(p + "attn_kv_a_norm.weight", lora, 1);
      matrix(p + "attn_kv_b.weight", lora, static_cast<uint64_t>(s.n_heads) * (nope + vd));
    } else if (phi3) {
      matrix(p + "attn_qkv.weight", dim, q_dim + 2 * kv_dim);
    } else {
      matrix(p + "attn_q.weight", dim, q_dim);
      matrix(p + "attn_k.weight", dim, kv_dim);
      matrix(p + "attn_v.weight", dim, kv_dim);
    }
    if (s.attn_bias) {
      vec(p + "attn_q.bias", q_dim, 2);
      vec(p + "attn_k.bias", kv_dim, 2);
      vec(p + "attn_v.bias", kv_dim, 2);
    }
    if (qwen3) {
      vec(p + "attn_q_norm.weight", static_cast<uint64_t>(head_dim), 1);
      vec(p + "attn_k_norm.weight", static_cast<uint64_t>(head_dim), 1);
    }
    matrix(p + "attn_output.weight", mla ? static_cast<uint64_t>(s.n_heads) * vd : q_dim, dim);
    if (gemma2) vec(p + "post_attention_norm.weight", dim, 1);
    vec(p + "ffn_norm.weight", dim, 1);
    const bool moe_layer = s.n_experts > 0 && l >= s.n_dense_lead;
    if (moe_layer) {
      const auto ne = static_cast<uint64_t>(s.n_experts);
      const uint64_t ff = s.expert_hidden_dim > 0 ? static_cast<uint64_t>(s.expert_hidden_dim) : hidden;
      plan.push_back({p + "ffn_gate_inp.weight", {dim, ne}, 0, DType::kF32});
      if (s.v3_routing) plan.push_back({p + "exp_probs_b.bias", {ne}, 2, DType::kF32});
      experts(p + "ffn_gate_exps.weight", dim, ff, ne);
      experts(p + "ffn_up_exps.weight", dim, ff, ne);
      experts(p + "ffn_down_exps.weight", ff, dim, ne);
      if (s.n_shared_experts > 0) {  // DeepSeek-V2: ungated shared experts, one MLP of their sum
        const uint64_t sh = static_cast<uint64_t>(s.n_shared_experts) * ff;
        matrix(p + "ffn_gate_shexp.weight", dim, sh);
        matrix(p + "ffn_up_shexp.weight", dim, sh);
        matrix(p + "ffn_down_shexp.weight", sh, dim);
      }
      if (s.shared_expert_hidden_dim > 0) {
        const auto sh = static_cast<uint64_t>(s.shared_expert_hidden_dim);
        plan.push_back({p + "ffn_gate_inp_shexp.weight", {dim}, 0, DType::kF32});
        matrix(p + "ffn_gate_shexp.weight", dim, sh);
        matrix(p + "ffn_up_shexp.weight", dim, sh);
        matrix(p + "ffn_down_shexp.weight", sh, dim);
      }
    } else if (phi3) {
      matrix(p + "ffn_up.weight", dim, 2 * hidden);
    } else {
      matrix(p + "ffn_gate.weight", dim, hidden);
      matrix(p + "ffn_up.weight", dim, hidden);
    }
    if (!moe_layer) matrix(p + "ffn_down.weight", hidden, dim);
    if (gemma2) vec(p + "post_ffw_norm.weight", dim, 1);
  }
  vec("output_norm.weight", dim, 1);
  if (!s.tied) matrix("output.weight", dim, static_cast<uint64_t>(s.vocab_size));

  GgufWriter w;
  w.set_alignment(32);
  const std::string a = s.architecture + ".";
  w.set_string("general.architecture", s.architecture);
  w.set_string("general.name", "tessera-synth-" + s.like);
  w.set_u32("general.file_type", file_type(o.dtype, o.mix));
  if (dtype_is_quantized(o.dtype)) w.set_u32("general.quantization_version", 2);
  w.set_u64("tessera.synth.seed", o.seed);
  w.set_u32(a + "context_length", static_cast<uint32_t>(s.context_length));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(s.dim));
  w.set_u32(a + "block_count", static_cast<uint32_t>(s.n_layers));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(s.hidden_dim));
  w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(mla ? s.rope_dim : head_dim));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_heads));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  w.set_f32(a + "rope.freq_base", s.rope_theta);
  w.set_u32(a + "vocab_size", static_cast<uint32_t>(s.vocab_size));
  if (s.head_dim > 0) {
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(head_dim));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(mla ? s.v_head_dim : head_dim));
  }
  if (mla) {
    if (s.q_lora_rank > 0) w.set_u32(a + "attention.q_lora_rank", static_cast<uint32_t>(s.q_lora_rank));
    w.set_u32(a + "attention.kv_lora_rank", static_cast<uint32_t>(s.kv_lora_rank));
    w.set_u32(a + "leading_dense_block_count", static_cast<uint32_t>(s.n_dense_lead));
    w.set_u32(a + "expert_shared_count", static_cast<uint32_t>(s.n_shared_experts));
    w.set_f32(a + "expert_weights_scale", s.expert_weights_scale);
    w.set_u32(a + "expert_gating_func", s.v3_routing ? 2 : 1);  // softmax for DeepSeek-V2, sigmoid for V3
    if (s.v3_routing) {
      w.set_bool(a + "expert_weights_norm", true);
      if (s.n_expert_groups > 1) {
        w.set_u32(a + "expert_group_count", static_cast<uint32_t>(s.n_expert_groups));
        w.set_u32(a + "expert_group_used_count", static_cast<uint32_t>(s.n_expert_groups_used));
      }
    }
  }
  if (s.yarn_factor > 0.0f) {
    w.set_string(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", s.yarn_factor);
    w.set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(s.yarn_orig_ctx));
    w.set_f32(a + "rope.scaling.yarn_log_multiplier", s.yarn_log_mul);
  }
  if (s.sliding_window > 0) w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  if (s.longrope_orig_ctx > 0) {  // convert_hf_to_gguf.py's Phi3MiniModel: sqrt(1 + ln(scale) / ln(original))
    const double scale = static_cast<double>(s.context_length) / s.longrope_orig_ctx;
    const double attn = scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(s.longrope_orig_ctx))) : 1.0;
    w.set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(s.longrope_orig_ctx));
    w.set_f32(a + "rope.scaling.attn_factor", static_cast<float>(attn));
  }
  if (s.n_experts > 0) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_experts));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_experts_used));
    if (s.expert_hidden_dim > 0) w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.expert_hidden_dim));
    if (s.shared_expert_hidden_dim > 0) {
      w.set_u32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(s.shared_expert_hidden_dim));
    }
  }
  if (s.attn_softcap > 0.0f) w.set_f32(a + "attn_logit_softcapping", s.attn_softcap);
  if (s.final_softcap > 0.0f) w.set_f32(a + "final_logit_softcapping", s.final_softcap);
  w.set_string("tokenizer.ggml.model", vocab.model);
  w.set_string("tokenizer.ggml.pre", vocab.pre);
  w.set_string_array("tokenizer.ggml.tokens", vocab.tokens);
  if (!vocab.scores.empty()) w.set_f32_array("tokenizer.ggml.scores", vocab.scores);
  w.set_i32_array("tokenizer.ggml.token_type", vocab.types);
  if (!vocab.merges.empty()) w.set_string_array("tokenizer.ggml.merges", vocab.merges);
  if (vocab.bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab.bos));
  if (vocab.eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab.eos));
  if (vocab.unk >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(vocab.unk));
  if (!o.chat_template.empty()) w.set_string("tokenizer.chat_template", o.chat_template);
  w.set_bool("tokenizer.ggml.add_bos_token", vocab.model == "llama");
  w.set_bool("tokenizer.ggml.add_eos_token", false);
  if (vocab.model == "llama") w.set_bool("tokenizer.ggml.add_space_prefix", true);
  for (const PlannedTensor& t : plan) w.add_tensor(t.name, ggml_from_dtype(t.dtype), t.ne);

  std::vector<float> values;
  return w.write_file(o.out_path, [&](size_t i, std::vector<uint8_t>& out) {
    const PlannedTensor& t = plan[i];
    uint64_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    values.resize(static_cast<size_t>(n));
    if (t.kind == 3) {  // rope_freqs.weight
      values = llama3_rope_factors(s.rope_theta, head_dim, s.llama3_rope_factor);
    } else if (t.kind == 4 || t.kind == 5) {  // LongRoPE: 1 + top * (i / (n - 1))^2
      const float top = t.kind == 4 ? 60.0f : 2.0f;
      const auto n_f = static_cast<float>(values.size());
      for (size_t k = 0; k < values.size(); ++k) {
        const float x = static_cast<float>(k) / std::max(1.0f, n_f - 1.0f);
        values[k] = 1.0f + top * x * x;
      }
    } else {
      synth_values(o.seed, t.name, t.kind, values.size(), values.data(), s.weight_std);
    }
    switch (t.dtype) {
      case DType::kF32:
        out.resize(values.size() * 4);
        std::memcpy(out.data(), values.data(), out.size());
        break;
      case DType::kF16:
        out.resize(values.size() * 2);
        for (size_t k = 0; k < values.size(); ++k) {
          const uint16_t h = f32_to_fp16(values[k]);
          std::memcpy(out.data() + 2 * k, &h, 2);
        }
        break;
      case DType::kQ8_0:
        out.resize(values.size() / 32 * 34);
        quantize_q8_0(values.data(), static_cast<int64_t>(values.size()), out.data());
        break;
      default: {
        const auto cols = static_cast<int64_t>(t.ne[0]);
        const size_t row_bytes = dtype_row_bytes(t.dtype, cols);
        out.resize(row_bytes * (values.size() / static_cast<size_t>(cols)));
        for (size_t r = 0; r < values.size() / static_cast<size_t>(cols); ++r) {
          quantize_row(t.dtype, values.data() + r * static_cast<size_t>(cols), out.data() + r * row_bytes, cols);
        }
        break;
      }
    }
  });
}

}  // namespace tessera
