// Private loader plumbing shared by the three formats.
//
// Each format parser produces a TensorMap (tensors under their canonical GGUF names, e.g.
// "blk.3.attn_q.weight", "token_embd.weight", still pointing into the file's bytes) and a
// ModelConfig; assemble_model() then validates every shape against the config, fills the
// Model's Tensors, converts norms and biases to F32, and computes the fingerprint. So shape
// and dtype rules live in one place for all formats.
//
// Error codes used by every loader (stated once here):
//   kIoError        the file cannot be opened/read
//   kTruncatedFile  the file ends before a declared field or tensor
//   kCorruptFile    content contradicts the format: bad magic, bad offsets, overflowing
//                   sizes, shape mismatch vs config, missing tensor or key, bad JSON
//   kUnsupported    valid but unsupported: version, dtype, architecture
// Every message starts with the file path and names the tensor or key at fault.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "file_bytes.h"
#include "tessera/model/model.h"

namespace tessera::loaders {

// One tensor as the file stores it. Non-owning: `data` points into a FileBytes (or a buffer
// owned by the LoadedModel being built).
struct RawTensor {
  std::string name;             // name in the file, for error messages
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;   // outermost first: a [rows, cols] matrix is {rows, cols}
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  TensorExec exec;              // set by a placer (LoadOptions::placer), copied into the Tensor
};
using TensorMap = std::unordered_map<std::string, RawTensor>;  // canonical name -> tensor

// The concrete Model every loader returns. Owns the file mappings its Tensors point into
// and any converted buffers. Mutable only while a loader builds it.
class LoadedModel final : public Model {
 public:
  LoadedModel(ModelFormat format, std::string path) {
    format_ = format;
    path_ = std::move(path);
  }
  ModelConfig& mutable_config() { return config_; }
  void retain(std::shared_ptr<const FileBytes> file) { files_.push_back(std::move(file)); }
  bool file_mapped(const void* p, size_t n) const override {
    const auto* b = static_cast<const uint8_t*>(p);
    for (const auto& f : files_) {
      if (f->mapped() && b >= f->data() && b + n <= f->data() + f->size()) return true;
    }
    return false;
  }
  // A zero-initialized, 64-byte aligned buffer owned by this model.
  uint8_t* allocate(size_t bytes);

 private:
  struct AlignedDelete {
    void operator()(uint8_t* p) const;
  };
  std::vector<std::shared_ptr<const FileBytes>> files_;
  std::vector<std::unique_ptr<uint8_t, AlignedDelete>> buffers_;
};

// The architectures the loaders accept: llama, mistral, qwen2, qwen2moe, qwen3, qwen3moe, deepseek2, gemma2, phi3.
bool architecture_supported(const std::string& architecture);
std::string supported_architectures();

// Checks config values are positive, consistent (heads divide, head_dim even) and below
// sane caps so that later size arithmetic cannot overflow. kCorruptFile naming the field.
Status validate_config(const ModelConfig& config, const std::string& file);

// Elements [0, n) of an F32, F16 or BF16 tensor as f32 into `out` (the caller has checked the
// dtype and that the tensor holds n elements).
void values_to_f32(const RawTensor& t, int64_t n, float* out);

// Fills `model`'s tensors from `tensors` (see file comment). Requires a validated config.
// With options.placer, the tensors are first placed (place_tensors) and the model assembled
// from the placed ones.
Status assemble_model(LoadedModel& model, const TensorMap& tensors, const std::string& file,
                      const LoadOptions& options = {});

// Runs `placer` over every tensor (in a stable order: token_embd, the layers by number, the
// rest by name) and returns the map with the converted tensors (buffers owned by `model`) and
// the execution choices set. Errors: the placer's; kCorruptFile for a tensor whose bytes do not
// match its shape; kInvalidArgument for a conversion its block sizes do not allow.
Result<TensorMap> place_tensors(LoadedModel& model, const TensorMap& tensors, const TensorPlacer& placer,
                                const std::string& file);

// Content hash of config + sampled tensor bytes (defined in model.cpp).
uint64_t compute_fingerprint(const Model& model);

// Overflow-checked helpers: false on overflow.
bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out);
bool add_overflows(uint64_t a, uint64_t b, uint64_t* out);

// Per-format loaders (llama2c_loader.cpp, gguf_loader.cpp, hf_loader.cpp).
Result<std::unique_ptr<Model>> load_llama2c(std::shared_ptr<const FileBytes> file, const LoadOptions& options = {});
Result<std::unique_ptr<Model>> load_gguf(std::shared_ptr<const FileBytes> file, const LoadOptions& options = {});
// The embedded vocabulary of a GGUF file, from its metadata only (no tensor is touched).
Result<VocabSpec> read_gguf_vocab(const FileBytes& file);
Result<std::unique_ptr<Model>> load_hf_directory(const std::string& dir, const LoadOptions& options);
// The Hugging Face loader after file I/O: config.json's text and the safetensors shards
// (tests and fuzz targets call it with in-memory bytes). `dir` labels errors.
Result<std::unique_ptr<Model>> load_hf_from(const std::string& dir, const std::string& config_text,
                                            std::vector<std::shared_ptr<const FileBytes>> shards,
                                            const LoadOptions& options = {});

}  // namespace tessera::loaders
