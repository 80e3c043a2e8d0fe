// Reading a Hugging Face config.json into a ModelConfig (hf_loader.cpp's first half): typed
// key access with errors naming the key, and each family's keys as convert_hf_to_gguf.py maps
// them to llama.cpp's (so that a directory computes what its GGUF does) or as transformers
// computes them where the two agree. Errors: kCorruptFile (a key missing or of the wrong type or
// range), kUnsupported (a setting Tessera does not compute), each naming config.json's path.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/common/result.h"
#include "tessera/model/model.h"

namespace tessera::loaders {

// Typed access to one JSON object (config.json or a nested object such as rope_scaling); holds
// a reference: the object must outlive it.
class HfConfig {
 public:
  HfConfig(const nlohmann::json& j, std::string path) : j_(j), path_(std::move(path)) {}

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
  // The first of `keys` that is present and not null, as a string (`fallback` when none is):
  // for keys that transformers renamed (rope_scaling's "rope_type", formerly "type").
  Result<std::string> first_string(std::initializer_list<const char*> keys, std::string fallback) const {
    for (const char* key : keys) {
      if (has(key)) return string(key);
    }
    return fallback;
  }
  bool present(const char* key) const { return j_.contains(key); }  // null included
  bool has(const char* key) const {
    auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }

 private:
  const nlohmann::json& j_;
  std::string path_;
};

// The family-specific keys of config.json (`model_type` already checked by the caller): MoE
// (mixtral, qwen2_moe, qwen3_moe), qwen3's Q/K norms, DeepSeek-V2/V3's latent attention and
// routing, Gemma 2's norms / soft-caps / windows, Phi-3's window and LongRoPE, then
// rope_scaling (llama3, linear, yarn, dynamic) and DeepSeek's attention scale. The generic keys
// (dim, heads, head_dim, ...) and rope_layout must be set before.
Status read_hf_family(const nlohmann::json& cj, const HfConfig& cfg, ModelConfig& c, const std::string& model_type,
                      const std::string& config_path);

}  // namespace tessera::loaders
