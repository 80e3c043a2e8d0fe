// GgufWriter: builds GGUF v3 files (used by `tessera model synth` and by tests that craft
// valid and malformed files).
//
// Usage: set metadata (kept in insertion order; setting a key again replaces its value),
// declare tensors with add_tensor(), then either
//   - serialize(data) for a whole file in memory (tests), or
//   - write_file(path, producer) to stream a large file: producer(i, out) must append
//     exactly tensor_nbytes(i) bytes for tensor i; tensors are written in declaration order.
// Layout: header, metadata, tensor infos, zero padding to `alignment`, then each tensor at
// an aligned offset (zero padding between). general.alignment is written only if set.
// Not thread-safe; a writer is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gguf.h"
#include "tessera/common/result.h"

namespace tessera::loaders {

// Where each part ended up in the serialized bytes (for tests that corrupt specific fields).
struct GgufLayout {
  size_t metadata_offset = 0;                // first key/value (right after the 24-byte header)
  std::vector<size_t> kv_offsets;            // start of each key/value
  std::vector<size_t> tensor_info_offsets;   // start of each tensor info (its name length)
  size_t data_offset = 0;                    // start of the aligned data section
};

class GgufWriter {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // Any value (e.g. nested arrays or odd types in tests).
  void set_value(const std::string& key, const GgufValue& v);
  void erase(const std::string& key);  // drops a key (tests: "missing key" cases)
  // Sets general.alignment (u32) and uses it for the layout. Must be a power of two.
  void set_alignment(uint32_t alignment);

  // ne in ggml order (ne[0] = contiguous columns). Returns the tensor's index.
  size_t add_tensor(const std::string& name, uint32_t ggml_type, std::vector<uint64_t> ne);
  size_t tensor_count() const { return tensors_.size(); }
  uint64_t tensor_nbytes(size_t i) const;

  // Everything up to (and including the padding before) the data section.
  std::vector<uint8_t> header_bytes(GgufLayout* layout = nullptr) const;
  // A whole file; data[i] must hold tensor_nbytes(i) bytes.
  std::vector<uint8_t> serialize(const std::vector<std::vector<uint8_t>>& data, GgufLayout* layout = nullptr) const;
  // Streams a file to `path`. Errors: kIoError, kInternal if a producer wrote a wrong size.
  using Producer = std::function<void(size_t index, std::vector<uint8_t>& out)>;
  Status write_file(const std::string& path, const Producer& producer) const;

 private:
  struct TensorDecl {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> ne;
    uint64_t offset;
    uint64_t nbytes;
  };
  void put(const std::string& key, GgufValue v);

  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<TensorDecl> tensors_;
  uint64_t alignment_ = 32;
  uint64_t data_size_ = 0;
};

}  // namespace tessera::loaders
