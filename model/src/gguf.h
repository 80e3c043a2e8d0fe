// GGUF (v2 and v3) container parsing, independent of what the tensors mean.
//
// parse_gguf() reads the header, every metadata key/value (all 13 value types, nested
// arrays included), every tensor info, and checks that each tensor's data lies inside the
// file at an aligned offset. It trusts no count from the file: string lengths and array
// sizes are capped by the bytes that remain, all size arithmetic is overflow-checked.
// The GgufFile it returns points into the FileBytes (which the caller keeps alive).
// Errors (loaded_model.h codes): kTruncatedFile, kCorruptFile, kUnsupported (version,
// unknown ggml type), each naming the file and the key or tensor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "file_bytes.h"
#include "tessera/common/dtype.h"
#include "tessera/common/result.h"

namespace tessera::loaders {

enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* gguf_type_name(GgufType t);

// ggml tensor type ids (ggml.h enum ggml_type) that this code knows the block layout of.
enum GgmlType : uint32_t {
  kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ5_0 = 6, kGgmlQ5_1 = 7,
  kGgmlQ8_0 = 8, kGgmlQ8_1 = 9, kGgmlQ2_K = 10, kGgmlQ3_K = 11, kGgmlQ4_K = 12, kGgmlQ5_K = 13,
  kGgmlQ6_K = 14, kGgmlQ8_K = 15, kGgmlIQ4_NL = 20, kGgmlIQ4_XS = 23, kGgmlI8 = 24, kGgmlI16 = 25, kGgmlI32 = 26, kGgmlI64 = 27,
  kGgmlF64 = 28, kGgmlBF16 = 30,
};
// Name ("q8_0"), or nullptr for an id we do not know.
const char* ggml_type_name(uint32_t type);
// Elements per block and bytes per block; false for unknown ids.
bool ggml_type_layout(uint32_t type, uint64_t* block_size, uint64_t* block_bytes);
// The DType for a ggml type we can compute with (kSupportedGgmlTypes), or nullopt.
std::optional<DType> dtype_from_ggml(uint32_t type);
uint32_t ggml_from_dtype(DType t);
// The supported weight types, for error messages: "f32, f16, bf16, q4_0, ..., iq4_xs".
const char* supported_ggml_types();

// One metadata value. Scalars: integers (and bool) in `i` (u64 also in `u`), floats in `f`,
// strings in `str`. Arrays: `elem` is the element type and exactly one of ints/floats/
// strings/arrays holds the elements.
struct GgufValue {
  GgufType type = GgufType::kU8;
  GgufType elem = GgufType::kU8;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0.0;
  std::string str;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<GgufValue> arrays;

  bool is_integer() const;  // any integer type or bool
  bool is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }
  size_t array_size() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // ggml order: ne[0] is the contiguous dimension (columns)
  uint32_t type = 0;         // ggml type id
  uint64_t offset = 0;       // relative to the data section
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
};

struct GgufFile {
  std::string path;
  uint32_t version = 0;
  uint64_t alignment = 32;
  size_t data_offset = 0;  // absolute offset of the data section
  std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order
  std::unordered_map<std::string, size_t> index;             // key -> metadata position
  std::vector<GgufTensorInfo> tensors;                        // in file order

  const GgufValue* find(std::string_view key) const;
};

Result<GgufFile> parse_gguf(const FileBytes& file);

}  // namespace tessera::loaders
