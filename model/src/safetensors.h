// safetensors container parsing: u64 little-endian header length, a JSON header
//   {"name": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"k": "v"}}
// then the data, offsets relative to the end of the header.
//
// parse_safetensors() checks the header length against the file, the JSON, every tensor's
// dtype/shape/offsets (overflow-checked, inside the data section, size == shape x dtype).
// Tensors point into the FileBytes, which the caller keeps alive. Errors (loaded_model.h
// codes) name the file and the tensor: kTruncatedFile, kCorruptFile (bad JSON, bad
// offsets, size mismatch), kUnsupported (unknown dtype string).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "file_bytes.h"
#include "tessera/common/result.h"

namespace tessera::loaders {

struct SafetensorsTensor {
  std::string dtype;            // as written: "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;   // outermost first
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
};

struct SafetensorsFile {
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;  // __metadata__ (string values only)
};

Result<SafetensorsFile> parse_safetensors(const FileBytes& file);

}  // namespace tessera::loaders
