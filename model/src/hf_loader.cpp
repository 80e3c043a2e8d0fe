// Hugging Face model directories: config.json + model.safetensors, or shards listed in
// model.safetensors.index.json ("weight_map": {tensor: file}). HF stores Q/K for RoPE by
// halves (rotate_half), so rope_layout = kHalves.
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "loaded_model.h"
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
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return fallback;
    if (!it->is_number()) return make_error(ErrorCode::kCorruptFile, path_ + ": key " + key + " is not a number");
    return it->get<float>();
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
  bool has(const char* key) const {
    auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }

 private:
  const json& j_;
  std::string path_;
};

// HF parameter name -> canonical (GGUF) name, or "" for tensors the model does not use.
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
      {"mlp.up_proj.weight", "ffn_up.weight"},          {"mlp.down_proj.weight", "ffn_down.weight"}};
  auto it = kLayer.find(hf.substr(dot + 1));
  if (it == kLayer.end()) return "";
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
  TS_ASSIGN_OR_RETURN(c.architecture, cfg.string("model_type"));
  if (c.architecture != "llama" && c.architecture != "mistral" && c.architecture != "qwen2") {
    return make_error(ErrorCode::kUnsupported, config_path + ": model_type '" + c.architecture +
                                                   "' is not supported (llama, mistral, qwen2)");
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
  if (cfg.has("rope_scaling")) {
    TS_LOG(kWarn) << config_path << ": rope_scaling is not implemented yet and is ignored";
  }
  TS_TRY(validate_config(c, config_path));

  TensorMap tensors;
  for (std::shared_ptr<const FileBytes>& fb : shards) {
    const std::string path = fb->path();
    TS_ASSIGN_OR_RETURN(SafetensorsFile st, parse_safetensors(*fb));
    for (const auto& [name, t] : st.tensors) {
      const std::string canonical = canonical_name(name);
      if (canonical.empty()) continue;
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
