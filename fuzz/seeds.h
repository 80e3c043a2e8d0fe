// Crafted model files for fuzzing seeds and malformed-input tests: a tiny valid Llama/Qwen2
// GGUF (dim 32, hidden 64, 2 layers, 4 heads, 2 KV heads, vocab 48, untied output, with an
// embedded SentencePiece vocabulary) and the same model as safetensors + config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf_writer.h"
#include "tessera/common/dtype.h"

namespace tessera::fuzz {

struct TinyModel {
  std::string architecture = "llama";    // llama | qwen2 (adds Q/K/V biases)
  tessera::DType matrix_dtype = tessera::DType::kF32;  // any DType (Q8_0/Q4_0: rows are multiples of 32)
  bool with_vocab = true;
  uint32_t alignment = 0;  // 0: the default 32 and no general.alignment key
};

inline constexpr int32_t kTinyDim = 32, kTinyHidden = 64, kTinyLayers = 2, kTinyHeads = 4, kTinyKvHeads = 2,
                         kTinyVocab = 48, kTinyContext = 64;

// The writer (metadata + tensor declarations) and each tensor's bytes, so that tests can
// change metadata or tensors before serializing.
struct TinyGguf {
  loaders::GgufWriter writer;
  std::vector<std::vector<uint8_t>> data;
  std::vector<uint8_t> serialize(loaders::GgufLayout* layout = nullptr) const {
    return writer.serialize(data, layout);
  }
};
TinyGguf tiny_gguf(const TinyModel& options = {});

// The tiny model as a safetensors file (HF names; dtype "F32", "F16" or "BF16") and its config.json.
std::vector<uint8_t> tiny_safetensors(const std::string& dtype = "F32");
std::string tiny_config_json(const std::string& model_type = "llama");

// Every crafted seed of a kind ("gguf" or "safetensors").
std::vector<std::vector<uint8_t>> crafted_seeds(const std::string& kind);

}  // namespace tessera::fuzz
