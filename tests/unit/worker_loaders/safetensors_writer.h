// Test helper: writes safetensors files and Hugging Face model directories.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::worker::testutil {

struct StTensor {
  std::string dtype;  // "F32", "F16", "BF16"
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Serializes tensors (in name order) into safetensors bytes; header padded to 8 bytes.
inline std::vector<uint8_t> safetensors_bytes(const std::map<std::string, StTensor>& tensors,
                                              const nlohmann::json& extra_header = nlohmann::json::object()) {
  nlohmann::json header = extra_header;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  std::vector<uint8_t> out(8);
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), h.begin(), h.end());
  for (const auto& [name, t] : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace tessera::worker::testutil
