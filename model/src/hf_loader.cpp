// Hugging Face model directories: config.json + model.safetensors, or shards listed in
// model.safetensors.index.json ("weight_map": {tensor: file}). HF stores Q/K for RoPE by
// halves (rotate_half), so rope_layout = kHalves; config.json's keys per family: hf_config.h.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "loaded_model.h"
#include "hf_config.h"
#include "safetensors.h"
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

// Gemma's RMSNorm multiplies by (1 + w): every norm weight becomes 1 + w in f32 (as transformers
// computes it; convert_hf_to_gguf.py adds 1 in the file's dtype), in a buffer owned by `model`.
Status fold_gemma_norms(LoadedModel& model, TensorMap& tensors, const std::string& dir) {
  for (auto& [name, t] : tensors) {
    if (!name.ends_with("norm.weight")) continue;
    const int64_t n = t.shape.empty() ? 0 : t.shape.back();
    if (t.shape.size() != 1 || n <= 0) return make_error(ErrorCode::kCorruptFile, dir + ": tensor " + t.name + " is not a vector");
    if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16) {
      return make_error(ErrorCode::kCorruptFile, dir + ": tensor " + t.name + " is not F32, F16 or BF16");
    }
    auto* out = reinterpret_cast<float*>(model.allocate(static_cast<size_t>(n) * sizeof(float)));
    values_to_f32(t, n, out);
    for (int64_t i = 0; i < n; ++i) out[i] += 1.0f;
    t = RawTensor{.name = t.name + " (1 + w)", .dtype = DType::kF32, .shape = t.shape,
                  .data = reinterpret_cast<const uint8_t*>(out), .nbytes = static_cast<size_t>(n) * sizeof(float)};
  }
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
  HfConfig cfg(cj, config_path);
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
  // Gemma2Config ties by default (and the converter drops lm_head); the others do not.
  TS_ASSIGN_OR_RETURN(bool tie, cfg.boolean("tie_word_embeddings", model_type == "gemma2"));
  if (c.n_heads == 0) return make_error(ErrorCode::kCorruptFile, config_path + ": num_attention_heads is 0");
  TS_ASSIGN_OR_RETURN(c.head_dim, cfg.int32("head_dim", c.dim / c.n_heads));
  if (c.head_dim <= 0 || c.head_dim > 4096 || c.head_dim % 2 != 0) {  // before anything sized by it (rope_scaling)
    return make_error(ErrorCode::kCorruptFile, config_path + ": head_dim " + std::to_string(c.head_dim) +
                                                   " must be even and in [2, 4096]");
  }
  c.rope_layout = RopeLayout::kHalves;
  TS_TRY(read_hf_family(cj, cfg, c, model_type, config_path));
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
