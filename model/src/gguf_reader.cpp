// GGUF container parser (see gguf.h).
#include <cstring>
#include <limits>

#include "gguf.h"
#include "loaded_model.h"

namespace tessera::loaders {
namespace {

constexpr uint32_t kMaxDims = 4;          // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;         // nested arrays deeper than this are rejected
constexpr uint64_t kMaxKeyLength = 65536;  // keys are short identifiers

// Bounds-checked little-endian reader over the file bytes. Every read names what it reads
// so that a truncated file reports the field it ended in.
class Reader {
 public:
  explicit Reader(const FileBytes& file) : file_(file) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return file_.size() - pos_; }

  template <class T>
  Result<T> read(const std::string& what) {
    if (remaining() < sizeof(T)) return truncated(what);
    T v;
    std::memcpy(&v, file_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string> string(const std::string& what, uint64_t max_len) {
    TS_ASSIGN_OR_RETURN(uint64_t len, read<uint64_t>(what + " (string length)"));
    if (len > remaining()) return truncated(what + " (string of " + std::to_string(len) + " bytes)");
    if (len > max_len) {
      return corrupt(what + ": string length " + std::to_string(len) + " exceeds the limit of " + std::to_string(max_len));
    }
    std::string s(reinterpret_cast<const char*>(file_.data() + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

  Error truncated(const std::string& what) const {
    return make_error(ErrorCode::kTruncatedFile, file_.path() + ": GGUF file ends at byte " +
                                                     std::to_string(file_.size()) + " while reading " + what);
  }
  Error corrupt(const std::string& what) const {
    return make_error(ErrorCode::kCorruptFile, file_.path() + ": GGUF " + what);
  }

 private:
  const FileBytes& file_;
  size_t pos_ = 0;
};

// Smallest encoded size of one element of type t (to cap array counts by remaining bytes).
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

Status read_value(Reader& r, GgufType type, GgufValue& out, const std::string& key, int depth);

// Reads one scalar of an integer/float/bool type into i/u/f.
Status read_scalar(Reader& r, GgufType type, GgufValue& v, const std::string& key) {
  switch (type) {
    case GgufType::kU8: { TS_ASSIGN_OR_RETURN(uint8_t x, r.read<uint8_t>(key)); v.i = x; break; }
    case GgufType::kI8: { TS_ASSIGN_OR_RETURN(int8_t x, r.read<int8_t>(key)); v.i = x; break; }
    case GgufType::kU16: { TS_ASSIGN_OR_RETURN(uint16_t x, r.read<uint16_t>(key)); v.i = x; break; }
    case GgufType::kI16: { TS_ASSIGN_OR_RETURN(int16_t x, r.read<int16_t>(key)); v.i = x; break; }
    case GgufType::kU32: { TS_ASSIGN_OR_RETURN(uint32_t x, r.read<uint32_t>(key)); v.i = x; break; }
    case GgufType::kI32: { TS_ASSIGN_OR_RETURN(int32_t x, r.read<int32_t>(key)); v.i = x; break; }
    case GgufType::kU64: {
      TS_ASSIGN_OR_RETURN(uint64_t x, r.read<uint64_t>(key));
      v.u = x;
      v.i = static_cast<int64_t>(x);
      break;
    }
    case GgufType::kI64: { TS_ASSIGN_OR_RETURN(int64_t x, r.read<int64_t>(key)); v.i = x; break; }
    case GgufType::kF32: { TS_ASSIGN_OR_RETURN(float x, r.read<float>(key)); v.f = x; break; }
    case GgufType::kF64: { TS_ASSIGN_OR_RETURN(double x, r.read<double>(key)); v.f = x; break; }
    case GgufType::kBool: {
      TS_ASSIGN_OR_RETURN(uint8_t x, r.read<uint8_t>(key));
      if (x > 1) return r.corrupt("key " + key + ": bool value " + std::to_string(x) + " is not 0 or 1");
      v.i = x;
      break;
    }
    case GgufType::kString: case GgufType::kArray: TS_CHECK(false) << "not a scalar type";
  }
  if (type != GgufType::kU64) v.u = static_cast<uint64_t>(v.i);
  return ok_status();
}

Status read_array(Reader& r, GgufValue& v, const std::string& key, int depth) {
  if (depth >= kMaxArrayDepth) return r.corrupt("key " + key + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
  TS_ASSIGN_OR_RETURN(uint32_t elem, r.read<uint32_t>(key + " (array element type)"));
  if (!valid_type(elem)) return r.corrupt("key " + key + ": unknown array element type " + std::to_string(elem));
  v.elem = static_cast<GgufType>(elem);
  TS_ASSIGN_OR_RETURN(uint64_t count, r.read<uint64_t>(key + " (array length)"));
  const uint64_t min_size = min_encoded_size(v.elem);
  if (count > r.remaining() / min_size) {
    return r.truncated("key " + key + " (array of " + std::to_string(count) + " " + gguf_type_name(v.elem) + ")");
  }
  const size_t n = static_cast<size_t>(count);
  if (v.elem == GgufType::kString) {
    v.strings.reserve(n);
    for (size_t k = 0; k < n; ++k) {
      TS_ASSIGN_OR_RETURN(std::string s, r.string("key " + key + "[" + std::to_string(k) + "]", r.remaining()));
      v.strings.push_back(std::move(s));
    }
  } else if (v.elem == GgufType::kArray) {
    v.arrays.resize(n);
    for (size_t k = 0; k < n; ++k) {
      v.arrays[k].type = GgufType::kArray;
      TS_TRY(read_array(r, v.arrays[k], key + "[" + std::to_string(k) + "]", depth + 1));
    }
  } else if (v.elem == GgufType::kF32 || v.elem == GgufType::kF64) {
    v.floats.resize(n);
    GgufValue tmp;
    for (size_t k = 0; k < n; ++k) {
      TS_TRY(read_scalar(r, v.elem, tmp, key));
      v.floats[k] = tmp.f;
    }
  } else {
    v.ints.resize(n);
    GgufValue tmp;
    for (size_t k = 0; k < n; ++k) {
      TS_TRY(read_scalar(r, v.elem, tmp, key));
      v.ints[k] = tmp.i;
    }
  }
  return ok_status();
}

Status read_value(Reader& r, GgufType type, GgufValue& out, const std::string& key, int depth) {
  out.type = type;
  if (type == GgufType::kString) {
    TS_ASSIGN_OR_RETURN(out.str, r.string("value of key " + key, r.remaining()));
    return ok_status();
  }
  if (type == GgufType::kArray) return read_array(r, out, key, depth);
  return read_scalar(r, type, out, "value of key " + key);
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* const kNames[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kU16: case GgufType::kI16: case GgufType::kU32:
    case GgufType::kI32: case GgufType::kU64: case GgufType::kI64: case GgufType::kBool: return true;
    default: return false;
  }
}

size_t GgufValue::array_size() const {
  return ints.size() + floats.size() + strings.size() + arrays.size();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = index.find(std::string(key));
  return it == index.end() ? nullptr : &metadata[it->second].second;
}

const char* ggml_type_name(uint32_t type) {
  switch (type) {
    case kGgmlF32: return "f32";
    case kGgmlF16: return "f16";
    case kGgmlQ4_0: return "q4_0";
    case kGgmlQ4_1: return "q4_1";
    case kGgmlQ5_0: return "q5_0";
    case kGgmlQ5_1: return "q5_1";
    case kGgmlQ8_0: return "q8_0";
    case kGgmlQ8_1: return "q8_1";
    case kGgmlQ2_K: return "q2_K";
    case kGgmlQ3_K: return "q3_K";
    case kGgmlQ4_K: return "q4_K";
    case kGgmlQ5_K: return "q5_K";
    case kGgmlQ6_K: return "q6_K";
    case kGgmlQ8_K: return "q8_K";
    case kGgmlIQ4_NL: return "iq4_nl";
    case kGgmlIQ4_XS: return "iq4_xs";
    case kGgmlI8: return "i8";
    case kGgmlI16: return "i16";
    case kGgmlI32: return "i32";
    case kGgmlI64: return "i64";
    case kGgmlF64: return "f64";
    case kGgmlBF16: return "bf16";
    default: return nullptr;
  }
}

bool ggml_type_layout(uint32_t type, uint64_t* block_size, uint64_t* block_bytes) {
  uint64_t bs = 1, bb = 0;
  switch (type) {
    case kGgmlF32: bb = 4; break;
    case kGgmlF16: case kGgmlBF16: bb = 2; break;
    case kGgmlQ4_0: bs = 32; bb = 18; break;
    case kGgmlQ4_1: bs = 32; bb = 20; break;
    case kGgmlQ5_0: bs = 32; bb = 22; break;
    case kGgmlQ5_1: bs = 32; bb = 24; break;
    case kGgmlQ8_0: bs = 32; bb = 34; break;
    case kGgmlQ8_1: bs = 32; bb = 36; break;
    case kGgmlQ2_K: bs = 256; bb = 84; break;
    case kGgmlQ3_K: bs = 256; bb = 110; break;
    case kGgmlQ4_K: bs = 256; bb = 144; break;
    case kGgmlQ5_K: bs = 256; bb = 176; break;
    case kGgmlQ6_K: bs = 256; bb = 210; break;
    case kGgmlQ8_K: bs = 256; bb = 292; break;
    case kGgmlIQ4_NL: bs = 32; bb = 18; break;
    case kGgmlIQ4_XS: bs = 256; bb = 136; break;
    case kGgmlI8: bb = 1; break;
    case kGgmlI16: bb = 2; break;
    case kGgmlI32: bb = 4; break;
    case kGgmlI64: case kGgmlF64: bb = 8; break;
    default: return false;
  }
  *block_size = bs;
  *block_bytes = bb;
  return true;
}

namespace {

// DType <-> ggml type id, one row per supported type.
struct TypePair {
  DType dtype;
  uint32_t ggml;
};
constexpr TypePair kTypePairs[] = {
    {DType::kF32, kGgmlF32},   {DType::kF16, kGgmlF16},   {DType::kBF16, kGgmlBF16},     {DType::kQ4_0, kGgmlQ4_0},
    {DType::kQ4_1, kGgmlQ4_1}, {DType::kQ5_0, kGgmlQ5_0}, {DType::kQ5_1, kGgmlQ5_1},     {DType::kQ8_0, kGgmlQ8_0},
    {DType::kQ2_K, kGgmlQ2_K}, {DType::kQ3_K, kGgmlQ3_K}, {DType::kQ4_K, kGgmlQ4_K},     {DType::kQ5_K, kGgmlQ5_K},
    {DType::kQ6_K, kGgmlQ6_K}, {DType::kIQ4_NL, kGgmlIQ4_NL}, {DType::kIQ4_XS, kGgmlIQ4_XS},
};

}  // namespace

std::optional<DType> dtype_from_ggml(uint32_t type) {
  for (const TypePair& p : kTypePairs) {
    if (p.ggml == type) return p.dtype;
  }
  return std::nullopt;
}

uint32_t ggml_from_dtype(DType t) {
  for (const TypePair& p : kTypePairs) {
    if (p.dtype == t) return p.ggml;
  }
  return kGgmlF32;
}

const char* supported_ggml_types() {
  static const std::string list = [] {
    std::string s;
    for (const TypePair& p : kTypePairs) s += (s.empty() ? "" : ", ") + std::string(ggml_type_name(p.ggml));
    return s;
  }();
  return list.c_str();
}

Result<GgufFile> parse_gguf(const FileBytes& file) {
  Reader r(file);
  GgufFile g;
  g.path = file.path();
  TS_ASSIGN_OR_RETURN(uint32_t magic, r.read<uint32_t>("the magic"));
  if (std::memcmp(&magic, "GGUF", 4) != 0) return r.corrupt("magic is not 'GGUF' (not a GGUF file)");
  TS_ASSIGN_OR_RETURN(g.version, r.read<uint32_t>("the version"));
  if (g.version != 2 && g.version != 3) {
    return make_error(ErrorCode::kUnsupported, file.path() + ": GGUF version " + std::to_string(g.version) +
                                                   " is not supported (2 and 3 are)");
  }
  TS_ASSIGN_OR_RETURN(uint64_t n_tensors, r.read<uint64_t>("the tensor count"));
  TS_ASSIGN_OR_RETURN(uint64_t n_kv, r.read<uint64_t>("the metadata count"));
  // Each key/value needs at least 8 (key length) + 4 (type) + 1 bytes; each tensor info
  // 8 + 4 + 8 + 4 + 8 bytes.
  if (n_kv > r.remaining() / 13) return r.truncated("metadata (header says " + std::to_string(n_kv) + " keys)");
  if (n_tensors > r.remaining() / 32) return r.truncated("tensor infos (header says " + std::to_string(n_tensors) + " tensors)");

  g.metadata.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    TS_ASSIGN_OR_RETURN(std::string key, r.string("metadata key #" + std::to_string(k), kMaxKeyLength));
    TS_ASSIGN_OR_RETURN(uint32_t type, r.read<uint32_t>("the type of key " + key));
    if (!valid_type(type)) return r.corrupt("key " + key + " has unknown value type " + std::to_string(type));
    if (g.index.count(key) != 0) return r.corrupt("key " + key + " appears twice");
    GgufValue v;
    TS_TRY(read_value(r, static_cast<GgufType>(type), v, key, 0));
    g.index.emplace(key, g.metadata.size());
    g.metadata.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = g.find("general.alignment")) {
    if (!a->is_integer() || a->type == GgufType::kBool || a->i <= 0 || a->i > (1 << 30) || (a->i & (a->i - 1)) != 0) {
      return r.corrupt("key general.alignment must be a power of two (got " + std::to_string(a->i) + ")");
    }
    g.alignment = static_cast<uint64_t>(a->i);
  }

  std::unordered_map<std::string, size_t> seen;
  g.tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    TS_ASSIGN_OR_RETURN(t.name, r.string("tensor name #" + std::to_string(k), kMaxKeyLength));
    const std::string what = "tensor " + t.name;
    if (!seen.emplace(t.name, k).second) return r.corrupt(what + " appears twice");
    TS_ASSIGN_OR_RETURN(uint32_t n_dims, r.read<uint32_t>(what + " (dimension count)"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return r.corrupt(what + " has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    }
    uint64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      TS_ASSIGN_OR_RETURN(uint64_t ne, r.read<uint64_t>(what + " (dimension " + std::to_string(d) + ")"));
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || mul_overflows(elems, ne, &elems) ||
          elems > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return r.corrupt(what + ": element count overflows (dimension " + std::to_string(d) + " = " + std::to_string(ne) + ")");
      }
      t.ne.push_back(ne);
    }
    TS_ASSIGN_OR_RETURN(t.type, r.read<uint32_t>(what + " (type)"));
    TS_ASSIGN_OR_RETURN(t.offset, r.read<uint64_t>(what + " (offset)"));
    uint64_t block_size = 0, block_bytes = 0;
    if (!ggml_type_layout(t.type, &block_size, &block_bytes)) {
      return make_error(ErrorCode::kUnsupported, file.path() + ": GGUF " + what + " has unknown ggml type " +
                                                     std::to_string(t.type));
    }
    if (t.ne[0] % block_size != 0) {
      return r.corrupt(what + ": row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                       ggml_type_name(t.type) + " block size " + std::to_string(block_size));
    }
    uint64_t nbytes = 0;
    if (mul_overflows(elems / block_size, block_bytes, &nbytes)) return r.corrupt(what + ": byte size overflows");
    t.nbytes = static_cast<size_t>(nbytes);
    if (t.offset % g.alignment != 0) {
      return r.corrupt(what + ": data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                       std::to_string(g.alignment));
    }
    g.tensors.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment.
  const uint64_t pos = r.pos();
  const uint64_t data_offset = (pos + g.alignment - 1) / g.alignment * g.alignment;
  if (data_offset > file.size()) return r.truncated("the padding before the tensor data");
  g.data_offset = static_cast<size_t>(data_offset);
  const uint64_t data_size = file.size() - data_offset;
  for (GgufTensorInfo& t : g.tensors) {
    uint64_t end = 0;
    if (add_overflows(t.offset, t.nbytes, &end) || end > data_size) {
      return make_error(ErrorCode::kTruncatedFile,
                        file.path() + ": GGUF tensor " + t.name + " data [" + std::to_string(t.offset) + ", " +
                            std::to_string(t.offset) + " + " + std::to_string(t.nbytes) +
                            ") lies past the end of the file (data section holds " + std::to_string(data_size) +
                            " bytes)");
    }
    t.data = file.data() + g.data_offset + t.offset;
  }
  return g;
}

}  // namespace tessera::loaders
