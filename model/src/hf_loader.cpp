// Hugging Face model directories: config.json + model.safetensors, or shards listed in
// model.safetensors.index.json ("weight_map": {tensor: file}). HF stores Q/K for RoPE by
// halves (rotate_half), so rope_layout = kHalves; rope_scaling: read_rope_scaling.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "loaded_model.h"
#include "half.h"
#include "safetensors.h"
#include "synth.h"
#include "tessera/common/log.h"

namespace tessera::loaders {
namespace {

using nlohmann::json;

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIoError, path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<json> read_json(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string text, read_text(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(ErrorCode::kCorruptFile, path + ": not valid JSON");
  if (!j.is_object()) return make_error(ErrorCode::kCorruptFile, path + ": top level is not a JSON object");
  return j;
}

class Config {
 public:
  Config(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  Result<int32_t> int32(const char* key, std::optional<int32_t> fallback = std::nullopt) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      if (fallback) return *fallback;
      return make_error(ErrorCode::kCorruptFile, path_ + ": key " + key + " is missing");
    }
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX) {
      return make_error(ErrorCode::kCorruptFile, path_ + ": key " + key + " is not an integer in [0, 2^31)");
    }
    return static_cast<int32_t>(it->get<int64_t>());
  }
  Result<float> real(const char* key, float fallback) const {
    TS_ASSIGN_OR_RETURN(const double v, real64(key, fallback));
    return static_cast<float>(v);
  }
  // As the converters (Python floats) read it, for values computed on before rounding to f32.
  Result<double> real64(const char* key, double fallback) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return fallback;
    if (!it->is_number()) return make_error(ErrorCode::kCorruptFile, path_ + ": key " + key + " is not a number");
    return it->get<double>();
  }
  Result<bool> boolean(const char* key, bool fallback) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) return make_error(ErrorCode::kCorruptFile, path_ + ": key " + key + " is not a boolean");
    return it->get<bool>();
  }
  Result<std::string> string(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || !it->is_string()) {
      return make_error(ErrorCode::kCorruptFile, path_ + ": key " + key + " is missing or not a string");
    }
    return it->get<std::string>();
  }
  bool empty_array(const char* key) const {
    auto it = j_.find(key);
    return it != j_.end() && it->is_array() && it->empty();
  }
  bool has(const char* key) const {
    auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }

 private:
  const json& j_;
  std::string path_;
};

// A mixture-of-experts parameter: "mlp.experts.E.gate_proj.weight" (Qwen2-MoE, Qwen3-MoE) or
// "block_sparse_moe.experts.E.w1.weight" (Mixtral) -> "ffn_gate_exps.E" (E = the expert), else "".
std::string expert_name(const std::string& rest) {
  for (const char* prefix : {"mlp.experts.", "block_sparse_moe.experts."}) {
    const std::string p(prefix);
    if (rest.rfind(p, 0) != 0) continue;
    const size_t dot = rest.find('.', p.size());
    if (dot == std::string::npos || dot == p.size() || dot - p.size() > 5) return "";
    const std::string e = rest.substr(p.size(), dot - p.size());
    if (e.find_first_not_of("0123456789") != std::string::npos) return "";
    static const std::map<std::string, std::string> kProj = {
        {"gate_proj.weight", "ffn_gate_exps"}, {"up_proj.weight", "ffn_up_exps"}, {"down_proj.weight", "ffn_down_exps"},
        {"w1.weight", "ffn_gate_exps"},        {"w3.weight", "ffn_up_exps"},      {"w2.weight", "ffn_down_exps"}};
    auto it = kProj.find(rest.substr(dot + 1));
    return it == kProj.end() ? "" : it->second + "." + std::to_string(std::stoi(e));
  }
  return "";
}

// HF parameter name -> canonical (GGUF) name, or "" for tensors the model does not use. Expert
// matrices get "blk.N.ffn_gate_exps.E" names, stacked by stack_experts().
std::string canonical_name(const std::string& hf) {
  static const std::map<std::string, std::string> kTop = {{"model.embed_tokens.weight", "token_embd.weight"},
                                                          {"model.norm.weight", "output_norm.weight"},
                                                          {"lm_head.weight", "output.weight"}};
  if (auto it = kTop.find(hf); it != kTop.end()) return it->second;
  static const std::string kPrefix = "model.layers.";
  if (hf.rfind(kPrefix, 0) != 0) return "";
  const size_t dot = hf.find('.', kPrefix.size());
  if (dot == std::string::npos || dot == kPrefix.size()) return "";
  const std::string layer = hf.substr(kPrefix.size(), dot - kPrefix.size());
  if (layer.find_first_not_of("0123456789") != std::string::npos || layer.size() > 6) return "";
  static const std::map<std::string, std::string> kLayer = {
      {"input_layernorm.weight", "attn_norm.weight"},   {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},     {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},     {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},         {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},         {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},          {"mlp.down_proj.weight", "ffn_down.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"}, {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},       {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
      // DeepSeek-V2/V3 (modeling_deepseek.py): latent attention, ungated shared experts, V3's bias.
      {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
      {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
      {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
      {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
      {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
      {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
      // Gemma 2: the norms around attention and MLP (remapped from ffn_norm below: Gemma's
      // post_attention_layernorm is the attention output's norm); Phi-3's fused tensors.
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
      {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
      {"mlp.gate_up_proj.weight", "ffn_up.weight"}};
  auto it = kLayer.find(hf.substr(dot + 1));
  if (it == kLayer.end()) {
    const std::string e = expert_name(hf.substr(dot + 1));
    return e.empty() ? "" : "blk." + std::to_string(std::stoi(layer)) + "." + e;
  }
  return "blk." + std::to_string(std::stoi(layer)) + "." + it->second;
}

Result<DType> dtype_of(const std::string& file, const std::string& name, const std::string& st) {
  if (st == "F32") return DType::kF32;
  if (st == "F16") return DType::kF16;
  if (st == "BF16") return DType::kBF16;
  return make_error(ErrorCode::kUnsupported, file + ": safetensors tensor " + name + " has dtype " + st +
                                                 ", which is not supported (F32, F16, BF16)");
}

// The safetensors files of the directory: the index's shards, or model.safetensors.
Result<std::vector<std::string>> shard_files(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    TS_ASSIGN_OR_RETURN(json index, read_json(index_path));
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) {
      return make_error(ErrorCode::kCorruptFile, index_path + ": key weight_map is missing or not an object");
    }
    std::set<std::string> files;
    for (const auto& [tensor, file] : wm->items()) {
      if (!file.is_string()) {
        return make_error(ErrorCode::kCorruptFile, index_path + ": weight_map entry " + tensor + " is not a file name");
      }
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "..") {
        return make_error(ErrorCode::kCorruptFile, index_path + ": weight_map entry " + tensor +
                                                       " names a file outside the directory: " + f);
      }
      files.insert(f);
    }
    std::vector<std::string> out;
    for (const std::string& f : files) out.push_back(dir + "/" + f);
    return out;
  }
  if (fs::exists(dir + "/model.safetensors", ec)) return std::vector<std::string>{dir + "/model.safetensors"};
  return make_error(ErrorCode::kIoError, dir + ": neither model.safetensors nor model.safetensors.index.json exists");
}

// Hugging Face stores each expert as its own matrix; the model wants one stacked tensor per
// layer and projection (GGUF's ffn_*_exps, [n_experts, rows, cols]). Copies the experts'
// bytes, in expert order, into a buffer owned by `model`; every expert must be present with
// the same shape and dtype.
Status stack_experts(LoadedModel& model, TensorMap& tensors, const ModelConfig& c, const std::string& dir) {
  for (int32_t l = 0; l < c.n_layers; ++l) {
    if (!c.layer_is_moe(l)) continue;  // DeepSeek's leading dense layers
    for (const char* proj : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
      const std::string base = "blk." + std::to_string(l) + "." + proj;
      std::vector<const RawTensor*> parts;
      for (int32_t e = 0; e < c.n_experts; ++e) {
        auto it = tensors.find(base + "." + std::to_string(e));
        if (it == tensors.end()) {
          return make_error(ErrorCode::kCorruptFile, dir + ": expert " + std::to_string(e) + " of layer " + std::to_string(l) +
                                                         " (" + proj + ") is missing");
        }
        const RawTensor& t = it->second;
        if (!parts.empty() && (t.dtype != parts[0]->dtype || t.shape != parts[0]->shape || t.nbytes != parts[0]->nbytes)) {
          return make_error(ErrorCode::kCorruptFile, dir + ": tensor " + t.name + " differs in shape or dtype from expert 0's");
        }
        if (t.shape.size() != 2) return make_error(ErrorCode::kCorruptFile, dir + ": tensor " + t.name + " is not a matrix");
        parts.push_back(&t);
      }
      uint8_t* buf = model.allocate(parts[0]->nbytes * parts.size());
      for (size_t e = 0; e < parts.size(); ++e) std::memcpy(buf + e * parts[0]->nbytes, parts[e]->data, parts[0]->nbytes);
      RawTensor stacked{.name = base + " (stacked from " + std::to_string(parts.size()) + " experts)", .dtype = parts[0]->dtype,
                        .shape = {c.n_experts, parts[0]->shape[0], parts[0]->shape[1]}, .data = buf,
                        .nbytes = parts[0]->nbytes * parts.size()};
      for (int32_t e = 0; e < c.n_experts; ++e) tensors.erase(base + "." + std::to_string(e));
      tensors.emplace(base + ".weight", std::move(stacked));
    }
  }
  return ok_status();
}

// DeepSeek-V2 / V2-Lite / V3 (`deepseek_v2`, `deepseek_v3`), as convert_hf_to_gguf.py maps them
// to llama.cpp's deepseek2 keys: latent attention (kv_lora_rank, q_lora_rank null for Lite,
// key = qk_nope_head_dim + qk_rope_head_dim, v_head_dim), RoPE on adjacent pairs (the HF code
// de-interleaves q_pe/k_pe before rotate_half, i.e. the weights are in NORM order, as llama.cpp
// reads them), first_k_dense_replace dense layers, then routed experts (softmax for V2, sigmoid
// with e_score_correction_bias and optional groups for V3's noaux_tc) and n_shared_experts
// ungated shared experts. routed_scaling_factor and norm_topk_prob are kept as the converter
// writes them (expert_weights_scale, expert_weights_norm): the released configs that
// renormalize (V3) also scale, as llama.cpp computes.
Status read_hf_deepseek(const Config& cfg, ModelConfig& c, const std::string& config_path) {
  auto refuse = [&](const std::string& what) {
    return make_error(ErrorCode::kUnsupported, config_path + ": " + what + " is not supported");
  };
  auto wrong = [&](const std::string& what) { return make_error(ErrorCode::kCorruptFile, config_path + ": " + what); };
  c.architecture = "deepseek2";
  c.family = "deepseek2";
  c.rope_layout = RopeLayout::kInterleaved;
  TS_ASSIGN_OR_RETURN(c.kv_lora_rank, cfg.int32("kv_lora_rank"));
  TS_ASSIGN_OR_RETURN(c.q_lora_rank, cfg.int32("q_lora_rank", 0));
  TS_ASSIGN_OR_RETURN(const int32_t nope, cfg.int32("qk_nope_head_dim"));
  TS_ASSIGN_OR_RETURN(c.rope_dim, cfg.int32("qk_rope_head_dim"));
  TS_ASSIGN_OR_RETURN(c.v_head_dim, cfg.int32("v_head_dim"));
  if (c.kv_lora_rank <= 0 || c.kv_lora_rank > 65536) return wrong("kv_lora_rank is out of range [1, 65536]");
  if (c.q_lora_rank > 65536) return wrong("q_lora_rank is out of range [0, 65536]");
  if (nope <= 0 || nope > 4096 || c.rope_dim <= 0 || c.rope_dim > 4096 || c.rope_dim % 2 != 0) {
    return wrong("qk_nope_head_dim must be positive and qk_rope_head_dim positive and even");
  }
  c.head_dim = nope + c.rope_dim;
  if (c.v_head_dim <= 0 || c.v_head_dim > c.head_dim) {
    return refuse("v_head_dim " + std::to_string(c.v_head_dim) + " above the key length " + std::to_string(c.head_dim) +
                  " (the K/V cache pads V to the key length)");
  }
  c.n_kv_heads = c.n_heads;  // the decompressed K/V: one per head
  TS_ASSIGN_OR_RETURN(c.n_experts, cfg.int32("n_routed_experts"));
  TS_ASSIGN_OR_RETURN(c.n_experts_used, cfg.int32("num_experts_per_tok"));
  TS_ASSIGN_OR_RETURN(c.expert_hidden_dim, cfg.int32("moe_intermediate_size"));
  TS_ASSIGN_OR_RETURN(const int32_t shared, cfg.int32("n_shared_experts", 0));
  if (shared > 64) return wrong("n_shared_experts is out of range [0, 64]");
  c.shared_expert_hidden_dim = shared * c.expert_hidden_dim;
  TS_ASSIGN_OR_RETURN(c.n_dense_lead, cfg.int32("first_k_dense_replace", 0));
  if (c.n_dense_lead > c.n_layers) return wrong("first_k_dense_replace is above num_hidden_layers");
  TS_ASSIGN_OR_RETURN(const int32_t freq, cfg.int32("moe_layer_freq", 1));
  if (freq != 1) return refuse("moe_layer_freq " + std::to_string(freq) + " (MoE layers not every layer)");
  TS_ASSIGN_OR_RETURN(c.expert_weights_norm, cfg.boolean("norm_topk_prob", false));
  TS_ASSIGN_OR_RETURN(c.expert_weights_scale, cfg.real("routed_scaling_factor", 1.0f));
  if (!(std::isfinite(c.expert_weights_scale) && c.expert_weights_scale > 0.0f)) return wrong("routed_scaling_factor must be positive");
  std::string scoring = "softmax", method = "greedy";
  if (cfg.has("scoring_func")) {
    TS_ASSIGN_OR_RETURN(scoring, cfg.string("scoring_func"));
  }
  if (cfg.has("topk_method")) {
    TS_ASSIGN_OR_RETURN(method, cfg.string("topk_method"));
  }
  if (scoring != "softmax" && scoring != "sigmoid") return refuse("scoring_func '" + scoring + "'");
  c.expert_sigmoid = scoring == "sigmoid";
  TS_ASSIGN_OR_RETURN(c.n_expert_groups, cfg.int32("n_group", 1));
  TS_ASSIGN_OR_RETURN(c.n_expert_groups_used, cfg.int32("topk_group", c.n_expert_groups));
  if (method == "greedy") {
    c.n_expert_groups = c.n_expert_groups_used = 1;  // greedy ignores n_group
  } else if (method != "group_limited_greedy" && method != "noaux_tc") {
    return refuse("topk_method '" + method + "'");
  }
  if (c.n_experts <= 0 || c.n_experts > 4096) return wrong("n_routed_experts is out of range [1, 4096]");
  if (c.n_expert_groups < 1 || c.n_experts % c.n_expert_groups != 0 ||
      (c.n_expert_groups > 1 && c.n_experts / c.n_expert_groups < 2)) {
    return wrong("n_group " + std::to_string(c.n_expert_groups) + " does not split " + std::to_string(c.n_experts) +
                 " experts into groups of at least 2");
  }
  if (c.n_expert_groups_used < 1 || c.n_expert_groups_used > c.n_expert_groups ||
      c.n_experts_used > c.n_expert_groups_used * (c.n_experts / c.n_expert_groups)) {
    return wrong("topk_group " + std::to_string(c.n_expert_groups_used) + " of " + std::to_string(c.n_expert_groups) +
                 " groups cannot hold " + std::to_string(c.n_experts_used) + " chosen experts");
  }
  if (c.n_expert_groups > 1 && !c.expert_sigmoid) {
    return refuse("topk_method '" + method + "' with " + std::to_string(c.n_expert_groups) + " groups and softmax scores");
  }
  return ok_status();
}

// Gemma's RMSNorm multiplies by (1 + w): every norm weight becomes 1 + w in f32 (as transformers
// computes it; convert_hf_to_gguf.py adds 1 in the file's dtype), in a buffer owned by `model`.
Status fold_gemma_norms(LoadedModel& model, TensorMap& tensors, const std::string& dir) {
  for (auto& [name, t] : tensors) {
    if (!name.ends_with("norm.weight")) continue;
    const int64_t n = t.shape.empty() ? 0 : t.shape.back();
    if (t.shape.size() != 1 || n <= 0) return make_error(ErrorCode::kCorruptFile, dir + ": tensor " + t.name + " is not a vector");
    auto* out = reinterpret_cast<float*>(model.allocate(static_cast<size_t>(n) * sizeof(float)));
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* p = t.data + static_cast<size_t>(i) * dtype_row_bytes(t.dtype, 1);
      float v = 0.0f;
      switch (t.dtype) {
        case DType::kF32: std::memcpy(&v, p, 4); break;
        case DType::kF16: v = fp16_to_f32(load_u16(p)); break;
        case DType::kBF16: v = bf16_to_f32(load_u16(p)); break;
        default: return make_error(ErrorCode::kCorruptFile, dir + ": tensor " + t.name + " is not F32, F16 or BF16");
      }
      out[i] = 1.0f + v;
    }
    t = RawTensor{.name = t.name + " (1 + w)", .dtype = DType::kF32, .shape = t.shape,
                  .data = reinterpret_cast<const uint8_t*>(out), .nbytes = static_cast<size_t>(n) * sizeof(float)};
  }
  return ok_status();
}

// Gemma 2 (`gemma2`), as convert_hf_to_gguf.py maps it and transformers computes it: embeddings
// × sqrt(hidden_size), queries scaled by 1/sqrt(query_pre_attn_scalar), attention and final
// logits soft-capped, a sliding window on every other layer (the even ones), pre- and post-norms
// around attention and MLP whose weights are stored as w - 1 (the norm multiplies by 1 + w:
// fold_gemma_norms), GeGLU with the tanh GELU; tied embeddings.
Status read_hf_gemma2(const Config& cfg, ModelConfig& c, const std::string& config_path) {
  c.architecture = "gemma2";
  c.family = "gemma2";
  TS_ASSIGN_OR_RETURN(const int32_t qpas, cfg.int32("query_pre_attn_scalar", c.head_dim));
  if (qpas <= 0) return make_error(ErrorCode::kCorruptFile, config_path + ": query_pre_attn_scalar must be positive");
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(qpas));
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  TS_ASSIGN_OR_RETURN(c.attn_softcap, cfg.real("attn_logit_softcapping", 0.0f));
  TS_ASSIGN_OR_RETURN(c.final_softcap, cfg.real("final_logit_softcapping", 0.0f));
  TS_ASSIGN_OR_RETURN(c.sliding_window, cfg.int32("sliding_window", 4096));
  c.swa_every = 2;
  c.post_norms = true;
  std::string act = "gelu_pytorch_tanh";
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    if (cfg.has(key)) {
      TS_ASSIGN_OR_RETURN(act, cfg.string(key));
      break;
    }
  }
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh") {
    return make_error(ErrorCode::kUnsupported, config_path + ": hidden_activation '" + act +
                                                   "' is not supported (gelu_pytorch_tanh)");
  }
  c.ffn_act = FfnActivation::kGeluTanh;
  for (float cap : {c.attn_softcap, c.final_softcap}) {
    if (!(std::isfinite(cap) && cap >= 0.0f)) {
      return make_error(ErrorCode::kCorruptFile, config_path + ": *_logit_softcapping must be a non-negative number");
    }
  }
  return ok_status();
}

// Phi-3 / Phi-3.5 (`phi3`): fused qkv_proj and gate_up_proj (row views, as from GGUF), a sliding
// window when the config has one, and LongRoPE (rope_scaling type longrope / su: long_factor and
// short_factor, head_dim / 2 each; original_max_position_embeddings) read as
// convert_hf_to_gguf.py writes it: the long factors when max_position_embeddings exceeds the
// original context (Tessera serves the whole context), attention factor
// sqrt(1 + ln(scale) / ln(original)).
Status read_hf_phi3(const json& cj, const Config& cfg, ModelConfig& c, const std::string& config_path) {
  c.architecture = "phi3";
  c.family = "phi3";
  TS_ASSIGN_OR_RETURN(c.sliding_window, cfg.int32("sliding_window", 0));
  auto rs = cj.find("rope_scaling");
  if (rs == cj.end() || rs->is_null()) return ok_status();
  if (!rs->is_object()) return make_error(ErrorCode::kCorruptFile, config_path + ": key rope_scaling is not an object");
  const Config r(*rs, config_path + " rope_scaling");
  std::string type;
  for (const char* key : {"type", "rope_type"}) {
    if (r.has(key)) {
      TS_ASSIGN_OR_RETURN(type, r.string(key));
      break;
    }
  }
  if (type != "longrope" && type != "su") return ok_status();  // read_rope_scaling decides
  TS_ASSIGN_OR_RETURN(const int32_t orig, cfg.int32("original_max_position_embeddings"));
  if (orig <= 0) return make_error(ErrorCode::kCorruptFile, config_path + ": original_max_position_embeddings must be positive");
  if (r.has("long_mscale") || r.has("short_mscale")) {
    return make_error(ErrorCode::kUnsupported, config_path + ": rope_scaling long_mscale / short_mscale (Phi-3-small) is not supported");
  }
  const bool long_factors = c.max_seq_len > orig;
  const char* key = long_factors ? "long_factor" : "short_factor";
  auto f = rs->find(key);
  for (const char* k : {"long_factor", "short_factor"}) {
    auto arr = rs->find(k);
    if (arr == rs->end() || !arr->is_array() || arr->size() != static_cast<size_t>(c.head_dim / 2)) {
      return make_error(ErrorCode::kCorruptFile, config_path + ": rope_scaling " + k + " must be an array of head_dim / 2 = " +
                                                     std::to_string(c.head_dim / 2) + " numbers");
    }
  }
  c.rope_freq_factors.clear();
  for (const json& v : *f) {
    if (!v.is_number() || !(v.get<double>() > 0.0) || !std::isfinite(v.get<double>())) {
      return make_error(ErrorCode::kCorruptFile, config_path + ": rope_scaling " + key + " holds a non-positive or non-numeric value");
    }
    c.rope_freq_factors.push_back(v.get<float>());
  }
  const double scale = static_cast<double>(c.max_seq_len) / orig;
  c.rope_attn_factor = scale > 1.0 ? static_cast<float>(std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(orig)))) : 1.0f;
  c.rope_longrope_long = long_factors;
  return ok_status();
}

// Mixture-of-experts and Qwen3 settings of config.json, as the GGUF converter maps them:
// mixtral (num_local_experts, renormalized top-k, experts of intermediate_size), qwen2_moe
// (num_experts, moe_intermediate_size, a gated shared expert of shared_expert_intermediate_size),
// qwen3_moe (num_experts, moe_intermediate_size, norm_topk_prob), qwen3 (Q/K norms).
Status read_hf_moe(const Config& cfg, ModelConfig& c, const std::string& model_type, const std::string& config_path) {
  if (model_type == "deepseek_v2" || model_type == "deepseek_v3") return read_hf_deepseek(cfg, c, config_path);
  if (model_type == "qwen3" || model_type == "qwen3_moe") c.qk_norm = true;
  if (model_type == "mixtral") {
    c.architecture = "llama";
    c.family = "mixtral";
    TS_ASSIGN_OR_RETURN(c.n_experts, cfg.int32("num_local_experts"));
    c.expert_hidden_dim = c.hidden_dim;
    c.expert_weights_norm = true;
  } else if (model_type == "qwen2_moe" || model_type == "qwen3_moe") {
    c.architecture = model_type == "qwen2_moe" ? "qwen2moe" : "qwen3moe";
    TS_ASSIGN_OR_RETURN(c.n_experts, cfg.int32("num_experts"));
    TS_ASSIGN_OR_RETURN(c.expert_hidden_dim, cfg.int32("moe_intermediate_size"));
    TS_ASSIGN_OR_RETURN(c.expert_weights_norm, cfg.boolean("norm_topk_prob", model_type == "qwen3_moe"));
    if (model_type == "qwen2_moe") {
      TS_ASSIGN_OR_RETURN(c.shared_expert_hidden_dim, cfg.int32("shared_expert_intermediate_size"));
    }
    TS_ASSIGN_OR_RETURN(int32_t step, cfg.int32("decoder_sparse_step", 1));
    if (step != 1 || (cfg.has("mlp_only_layers") && !cfg.empty_array("mlp_only_layers"))) {
      return make_error(ErrorCode::kUnsupported, config_path + ": dense layers between the MoE layers (decoder_sparse_step, "
                                                               "mlp_only_layers) are not supported");
    }
  } else {
    c.architecture = model_type == "qwen3" ? "qwen3" : model_type;
    return ok_status();
  }
  TS_ASSIGN_OR_RETURN(c.n_experts_used, cfg.int32("num_experts_per_tok"));
  return ok_status();
}

// DeepSeek's YaRN (DeepseekV2YarnRotaryEmbedding), as llama.cpp computes it: ggml's rope_yarn with
// beta_fast 32, beta_slow 1 over original_max_position_embeddings, and attention scaled by
// mscale^2 with mscale = 1 + 0.1 * mscale_all_dim * ln(factor) (yarn_log_multiplier). HF also
// multiplies cos/sin by yarn_mscale(mscale) / yarn_mscale(mscale_all_dim), which llama.cpp
// does not: only configs where that ratio is 1 (mscale == mscale_all_dim, as V2, V2-Lite and V3
// ship) are read; other betas are refused too.
Status read_deepseek_yarn(const Config& r, ModelConfig& c, const std::string& config_path) {
  TS_ASSIGN_OR_RETURN(const float factor, r.real("factor", 0.0f));
  TS_ASSIGN_OR_RETURN(const int32_t orig, r.int32("original_max_position_embeddings"));
  TS_ASSIGN_OR_RETURN(const float beta_fast, r.real("beta_fast", 32.0f));
  TS_ASSIGN_OR_RETURN(const float beta_slow, r.real("beta_slow", 1.0f));
  TS_ASSIGN_OR_RETURN(const double mscale, r.real64("mscale", 1.0));
  TS_ASSIGN_OR_RETURN(const double mscale_all_dim, r.real64("mscale_all_dim", 0.0));
  if (!(std::isfinite(factor) && factor >= 1.0f) || orig <= 0) {
    return make_error(ErrorCode::kCorruptFile, config_path + ": rope_scaling yarn needs factor >= 1 and "
                                                             "original_max_position_embeddings > 0");
  }
  if (beta_fast != 32.0f || beta_slow != 1.0f || mscale != mscale_all_dim) {
    return make_error(ErrorCode::kUnsupported, config_path + ": rope_scaling yarn with beta_fast " + std::to_string(beta_fast) +
                                                   ", beta_slow " + std::to_string(beta_slow) + ", mscale " +
                                                   std::to_string(mscale) + " != mscale_all_dim " +
                                                   std::to_string(mscale_all_dim) +
                                                   " is not supported (32, 1 and mscale == mscale_all_dim are)");
  }
  c.rope_yarn = true;
  c.yarn_orig_ctx = orig;
  c.yarn_log_mul = static_cast<float>(0.1 * mscale_all_dim);  // convert_hf_to_gguf.py's yarn_log_multiplier
  c.rope_freq_scale = 1.0f / factor;
  return ok_status();
}

// transformers' _compute_yarn_parameters (Qwen2.5 / Qwen3 long context: {"type": "yarn", "factor",
// "original_max_position_embeddings"}), which is llama.cpp's rope_yarn for these families:
// ramp between the corrected dimensions of beta_fast 32 / beta_slow 1 (floor / ceil), cos and
// sin scaled by attention_factor = 0.1 ln(factor) + 1. Other betas, another attention factor or
// DeepSeek's mscale keys outside DeepSeek: refused by name.
Status read_yarn(const Config& r, ModelConfig& c, const std::string& config_path) {
  TS_ASSIGN_OR_RETURN(const float factor, r.real("factor", 0.0f));
  TS_ASSIGN_OR_RETURN(const int32_t orig, r.int32("original_max_position_embeddings", c.max_seq_len));
  TS_ASSIGN_OR_RETURN(const double beta_fast, r.real64("beta_fast", 32.0));
  TS_ASSIGN_OR_RETURN(const double beta_slow, r.real64("beta_slow", 1.0));
  if (!(std::isfinite(factor) && factor >= 1.0f) || orig <= 0) {
    return make_error(ErrorCode::kCorruptFile, config_path + ": rope_scaling yarn needs factor >= 1 and "
                                                             "original_max_position_embeddings > 0");
  }
  const double default_attention = 0.1 * std::log(static_cast<double>(factor)) + 1.0;
  TS_ASSIGN_OR_RETURN(const double attention, r.real64("attention_factor", default_attention));
  TS_ASSIGN_OR_RETURN(const bool truncate, r.boolean("truncate", true));
  if (beta_fast != 32.0 || beta_slow != 1.0 || std::fabs(attention - default_attention) > 1e-6 || r.has("mscale") ||
      r.has("mscale_all_dim") || !truncate) {
    return make_error(ErrorCode::kUnsupported, config_path + ": rope_scaling yarn with other beta_fast/beta_slow than 32/1, "
                                                             "an attention_factor other than 0.1 ln(factor) + 1, mscale keys or "
                                                             "truncate false is not supported");
  }
  c.rope_yarn = true;
  c.yarn_orig_ctx = orig;
  c.rope_freq_scale = 1.0f / factor;
  return ok_status();
}

// config.json's rope_scaling, as transformers' ROPE_INIT_FUNCTIONS read it (`rope_type`, or
// `type` in older files): llama3 -> the per-frequency divisors convert_hf_to_gguf.py writes as
// rope_freqs.weight; linear -> positions / factor; yarn -> read_yarn / read_deepseek_yarn;
// default -> nothing; dynamic (NTK) changes the frequencies only past
// original_max_position_embeddings (= max_position_embeddings here) and is treated as none;
// anything else (longrope, ...) is refused by name rather than computed differently.
Status read_rope_scaling(const json& rs, ModelConfig& c, const std::string& config_path) {
  if (!rs.is_object()) return make_error(ErrorCode::kCorruptFile, config_path + ": key rope_scaling is not an object");
  const Config r(rs, config_path + " rope_scaling");
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (r.has(key)) {
      TS_ASSIGN_OR_RETURN(type, r.string(key));
      break;
    }
  }
  if (type == "default") return ok_status();
  if (type == "dynamic") {
    TS_LOG(kInfo) << config_path << ": rope_scaling dynamic (NTK) changes nothing below max_position_embeddings ("
                  << c.max_seq_len << "), the longest context served";
    return ok_status();
  }
  if (type == "yarn") return c.is_mla() ? read_deepseek_yarn(r, c, config_path) : read_yarn(r, c, config_path);
  if (type != "llama3" && type != "linear") {
    return make_error(ErrorCode::kUnsupported, config_path + ": rope_scaling type '" + type +
                                                   "' is not supported (default, linear, llama3, dynamic, yarn)");
  }
  TS_ASSIGN_OR_RETURN(const float factor, r.real("factor", 0.0f));
  if (!(std::isfinite(factor) && factor >= 1.0f)) {
    return make_error(ErrorCode::kCorruptFile, config_path + ": rope_scaling factor must be a number >= 1");
  }
  if (type == "linear") {
    c.rope_freq_scale = 1.0f / factor;
    return ok_status();
  }
  TS_ASSIGN_OR_RETURN(const float low, r.real("low_freq_factor", 1.0f));
  TS_ASSIGN_OR_RETURN(const float high, r.real("high_freq_factor", 4.0f));
  TS_ASSIGN_OR_RETURN(const int32_t old_ctx, r.int32("original_max_position_embeddings", 8192));
  if (!(low > 0.0f && high > low && old_ctx > 0)) {
    return make_error(ErrorCode::kCorruptFile, config_path + ": rope_scaling llama3 needs 0 < low_freq_factor < "
                                                             "high_freq_factor and original_max_position_embeddings > 0");
  }
  c.rope_freq_factors = llama3_rope_factors(c.rope_theta, c.head_dim, factor, low, high, old_ctx);
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<Model>> load_hf_from(const std::string& dir, const std::string& config_text,
                                            std::vector<std::shared_ptr<const FileBytes>> shards,
                                            const LoadOptions& options) {
  const std::string config_path = dir + "/config.json";
  json cj = json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  if (cj.is_discarded()) return make_error(ErrorCode::kCorruptFile, config_path + ": not valid JSON");
  if (!cj.is_object()) return make_error(ErrorCode::kCorruptFile, config_path + ": top level is not a JSON object");
  Config cfg(cj, config_path);
  auto model = std::make_unique<LoadedModel>(ModelFormat::kSafetensors, dir);
  ModelConfig& c = model->mutable_config();
  TS_ASSIGN_OR_RETURN(const std::string model_type, cfg.string("model_type"));
  static const std::set<std::string> kTypes = {"llama",     "mistral",   "qwen2",       "qwen3",       "mixtral", "qwen2_moe",
                                               "qwen3_moe", "deepseek_v2", "deepseek_v3", "gemma2", "phi3"};
  if (kTypes.count(model_type) == 0) {
    return make_error(ErrorCode::kUnsupported, config_path + ": model_type '" + model_type +
                                                   "' is not supported (llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, "
                                                   "deepseek_v2, deepseek_v3, gemma2, phi3)");
  }
  TS_ASSIGN_OR_RETURN(c.dim, cfg.int32("hidden_size"));
  TS_ASSIGN_OR_RETURN(c.hidden_dim, cfg.int32("intermediate_size"));
  TS_ASSIGN_OR_RETURN(c.n_layers, cfg.int32("num_hidden_layers"));
  TS_ASSIGN_OR_RETURN(c.n_heads, cfg.int32("num_attention_heads"));
  TS_ASSIGN_OR_RETURN(c.n_kv_heads, cfg.int32("num_key_value_heads", c.n_heads));
  TS_ASSIGN_OR_RETURN(c.vocab_size, cfg.int32("vocab_size"));
  TS_ASSIGN_OR_RETURN(c.max_seq_len, cfg.int32("max_position_embeddings"));
  TS_ASSIGN_OR_RETURN(c.rms_eps, cfg.real("rms_norm_eps", 1e-6f));
  TS_ASSIGN_OR_RETURN(c.rope_theta, cfg.real("rope_theta", 10000.0f));
  TS_ASSIGN_OR_RETURN(bool tie, cfg.boolean("tie_word_embeddings", false));
  if (c.n_heads == 0) return make_error(ErrorCode::kCorruptFile, config_path + ": num_attention_heads is 0");
  TS_ASSIGN_OR_RETURN(c.head_dim, cfg.int32("head_dim", c.dim / c.n_heads));
  c.rope_layout = RopeLayout::kHalves;
  TS_TRY(read_hf_moe(cfg, c, model_type, config_path));
  if (model_type == "gemma2") TS_TRY(read_hf_gemma2(cfg, c, config_path));
  if (model_type == "phi3") TS_TRY(read_hf_phi3(cj, cfg, c, config_path));
  const bool longrope = model_type == "phi3" && !c.rope_freq_factors.empty();  // read_hf_phi3 read rope_scaling
  if (auto rs = cj.find("rope_scaling"); rs != cj.end() && !rs->is_null() && !longrope) {
    TS_TRY(read_rope_scaling(*rs, c, config_path));
  }
  if (c.is_mla()) {  // as the GGUF loader: kq_scale = mscale^2 / sqrt(key_length)
    const float mscale = 1.0f + c.yarn_log_mul * std::log(1.0f / c.rope_freq_scale);
    c.attn_scale = mscale * mscale / std::sqrt(static_cast<float>(c.head_dim));
  }
  TS_TRY(validate_config(c, config_path));

  TensorMap tensors;
  for (std::shared_ptr<const FileBytes>& fb : shards) {
    const std::string path = fb->path();
    TS_ASSIGN_OR_RETURN(SafetensorsFile st, parse_safetensors(*fb));
    for (const auto& [name, t] : st.tensors) {
      std::string canonical = canonical_name(name);
      if (canonical.empty()) continue;
      if (model_type == "gemma2" && name.ends_with(".post_attention_layernorm.weight")) {  // the attention output's norm
        canonical = canonical.substr(0, canonical.size() - std::string("ffn_norm.weight").size()) + "post_attention_norm.weight";
      }
      if (canonical.rfind("blk.", 0) == 0 && std::stoll(canonical.substr(4)) >= c.n_layers) continue;  // V3's MTP layer
      TS_ASSIGN_OR_RETURN(DType dt, dtype_of(path, name, t.dtype));
      RawTensor raw{.name = name + " (" + path + ")", .dtype = dt, .shape = t.shape, .data = t.data, .nbytes = t.nbytes};
      if (!tensors.emplace(canonical, std::move(raw)).second) {
        return make_error(ErrorCode::kCorruptFile, path + ": tensor " + name + " appears in more than one shard");
      }
    }
    model->retain(std::move(fb));
  }
  c.attn_bias = tensors.count("blk.0.attn_q.bias") != 0;
  c.tied_embeddings = tie || tensors.count("output.weight") == 0;
  if (c.is_moe()) TS_TRY(stack_experts(*model, tensors, c, dir));
  if (model_type == "gemma2") TS_TRY(fold_gemma_norms(*model, tensors, dir));
  TS_TRY(assemble_model(*model, tensors, dir, options));
  return std::unique_ptr<Model>(std::move(model));
}

Result<std::unique_ptr<Model>> load_hf_directory(const std::string& dir, const LoadOptions& options) {
  const std::string config_path = dir + "/config.json";
  TS_ASSIGN_OR_RETURN(std::string config_text, read_text(config_path));
  TS_ASSIGN_OR_RETURN(std::vector<std::string> files, shard_files(dir));
  std::vector<std::shared_ptr<const FileBytes>> shards;
  for (const std::string& path : files) {
    TS_ASSIGN_OR_RETURN(std::shared_ptr<const FileBytes> fb, FileBytes::open(path, options.use_mmap));
    shards.push_back(std::move(fb));
  }
  return load_hf_from(dir, config_text, std::move(shards), options);
}

}  // namespace tessera::loaders
