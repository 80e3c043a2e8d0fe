#include "safetensors.h"

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "loaded_model.h"

namespace tessera::loaders {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

Error corrupt(const FileBytes& f, const std::string& what) {
  return make_error(ErrorCode::kCorruptFile, f.path() + ": safetensors " + what);
}

// Bytes per element of a safetensors dtype; 0 if unknown.
uint64_t element_size(const std::string& dtype) {
  static const std::map<std::string, uint64_t> kSizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
      {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

Result<uint64_t> json_u64(const FileBytes& f, const nlohmann::json& v, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return corrupt(f, what + " is not a non-negative integer (got " + std::string(v.type_name()) + ")");
}

}  // namespace

Result<SafetensorsFile> parse_safetensors(const FileBytes& file) {
  if (file.size() < 8) {
    return make_error(ErrorCode::kTruncatedFile, file.path() + ": safetensors file of " + std::to_string(file.size()) +
                                                     " bytes has no header length");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);
  if (header_len > kMaxHeaderBytes) {
    return corrupt(file, "header length " + std::to_string(header_len) + " exceeds the 100 MiB limit");
  }
  if (header_len > file.size() - 8) {
    return make_error(ErrorCode::kTruncatedFile, file.path() + ": safetensors header of " + std::to_string(header_len) +
                                                     " bytes runs past the end of the file (" +
                                                     std::to_string(file.size()) + " bytes)");
  }
  const char* begin = reinterpret_cast<const char*>(file.data() + 8);
  nlohmann::json header = nlohmann::json::parse(begin, begin + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return corrupt(file, "header is not valid JSON");
  if (!header.is_object()) return corrupt(file, "header is not a JSON object");
  const uint8_t* data = file.data() + 8 + header_len;
  const uint64_t data_size = file.size() - 8 - header_len;

  SafetensorsFile out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) return corrupt(file, "__metadata__ is not an object");
      for (const auto& [k, v] : info.items()) {
        if (v.is_string()) out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor " + name;
    if (!info.is_object()) return corrupt(file, what + " is not an object");
    auto dt = info.find("dtype");
    auto sh = info.find("shape");
    auto off = info.find("data_offsets");
    if (dt == info.end() || !dt->is_string()) return corrupt(file, what + " has no string dtype");
    if (sh == info.end() || !sh->is_array()) return corrupt(file, what + " has no shape array");
    if (off == info.end() || !off->is_array() || off->size() != 2) return corrupt(file, what + " has no [begin, end] data_offsets");
    SafetensorsTensor t;
    t.dtype = dt->get<std::string>();
    const uint64_t esize = element_size(t.dtype);
    if (esize == 0) {
      return make_error(ErrorCode::kUnsupported, file.path() + ": safetensors " + what + " has unknown dtype '" + t.dtype + "'");
    }
    uint64_t elems = 1;
    for (const auto& d : *sh) {
      TS_ASSIGN_OR_RETURN(uint64_t n, json_u64(file, d, what + " shape entry"));
      if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || mul_overflows(elems, n, &elems)) {
        return corrupt(file, what + ": element count overflows");
      }
      t.shape.push_back(static_cast<int64_t>(n));
    }
    TS_ASSIGN_OR_RETURN(uint64_t b, json_u64(file, (*off)[0], what + " data_offsets[0]"));
    TS_ASSIGN_OR_RETURN(uint64_t e, json_u64(file, (*off)[1], what + " data_offsets[1]"));
    if (b > e) return corrupt(file, what + " data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "] are reversed");
    if (e > data_size) {
      return make_error(ErrorCode::kTruncatedFile, file.path() + ": safetensors " + what + " data ends at " +
                                                       std::to_string(e) + ", past the " + std::to_string(data_size) +
                                                       " data bytes in the file");
    }
    uint64_t need = 0;
    if (mul_overflows(elems, esize, &need) || need != e - b) {
      return corrupt(file, what + " occupies " + std::to_string(e - b) + " bytes but its shape and dtype " + t.dtype +
                               " need " + std::to_string(need));
    }
    t.data = data + b;
    t.nbytes = static_cast<size_t>(need);
    out.tensors.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace tessera::loaders
