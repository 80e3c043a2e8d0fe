#include "gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace tessera::loaders {
namespace {

template <class T>
void append(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void append_string(std::vector<uint8_t>& out, const std::string& s) {
  append<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void append_scalar(std::vector<uint8_t>& out, GgufType t, int64_t i, uint64_t u, double f) {
  switch (t) {
    case GgufType::kU8: append<uint8_t>(out, static_cast<uint8_t>(i)); break;
    case GgufType::kI8: append<int8_t>(out, static_cast<int8_t>(i)); break;
    case GgufType::kU16: append<uint16_t>(out, static_cast<uint16_t>(i)); break;
    case GgufType::kI16: append<int16_t>(out, static_cast<int16_t>(i)); break;
    case GgufType::kU32: append<uint32_t>(out, static_cast<uint32_t>(i)); break;
    case GgufType::kI32: append<int32_t>(out, static_cast<int32_t>(i)); break;
    case GgufType::kF32: append<float>(out, static_cast<float>(f)); break;
    case GgufType::kBool: append<uint8_t>(out, i != 0 ? 1 : 0); break;
    case GgufType::kU64: append<uint64_t>(out, u); break;
    case GgufType::kI64: append<int64_t>(out, i); break;
    case GgufType::kF64: append<double>(out, f); break;
    case GgufType::kString: case GgufType::kArray: TS_CHECK(false) << "not a scalar";
  }
}

void append_value(std::vector<uint8_t>& out, const GgufValue& v) {
  if (v.type == GgufType::kString) {
    append_string(out, v.str);
  } else if (v.type == GgufType::kArray) {
    append<uint32_t>(out, static_cast<uint32_t>(v.elem));
    append<uint64_t>(out, v.array_size());
    for (const std::string& s : v.strings) append_string(out, s);
    for (const GgufValue& a : v.arrays) {
      append<uint32_t>(out, static_cast<uint32_t>(a.elem));
      std::vector<uint8_t> tmp;
      append_value(tmp, a);
      out.insert(out.end(), tmp.begin() + 4, tmp.end());
    }
    for (double f : v.floats) append_scalar(out, v.elem, 0, 0, f);
    for (int64_t i : v.ints) append_scalar(out, v.elem, i, static_cast<uint64_t>(i), 0.0);
  } else {
    append_scalar(out, v.type, v.i, v.u, v.f);
  }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

GgufValue scalar(GgufType type, int64_t i, uint64_t u, double f) {
  GgufValue v;
  v.type = type;
  v.i = i;
  v.u = u;
  v.f = f;
  return v;
}

GgufValue array_of(GgufType elem) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.elem = elem;
  return v;
}

}  // namespace

void GgufWriter::put(const std::string& key, GgufValue v) {
  for (auto& [k, old] : kv_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) { put(key, scalar(GgufType::kU32, v, v, 0)); }
void GgufWriter::set_i32(const std::string& key, int32_t v) {
  put(key, scalar(GgufType::kI32, v, static_cast<uint64_t>(v), 0));
}
void GgufWriter::set_u64(const std::string& key, uint64_t v) {
  put(key, scalar(GgufType::kU64, static_cast<int64_t>(v), v, 0));
}
void GgufWriter::set_f32(const std::string& key, float v) { put(key, scalar(GgufType::kF32, 0, 0, v)); }
void GgufWriter::set_bool(const std::string& key, bool v) { put(key, scalar(GgufType::kBool, v ? 1 : 0, v ? 1 : 0, 0)); }
void GgufWriter::set_string(const std::string& key, const std::string& s) {
  GgufValue v;
  v.type = GgufType::kString;
  v.str = s;
  put(key, std::move(v));
}
void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& a) {
  GgufValue v = array_of(GgufType::kString);
  v.strings = a;
  put(key, std::move(v));
}
void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& a) {
  GgufValue v = array_of(GgufType::kF32);
  v.floats.assign(a.begin(), a.end());
  put(key, std::move(v));
}
void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& a) {
  GgufValue v = array_of(GgufType::kI32);
  v.ints.assign(a.begin(), a.end());
  put(key, std::move(v));
}
void GgufWriter::erase(const std::string& key) {
  std::erase_if(kv_, [&](const auto& kv) { return kv.first == key; });
}
void GgufWriter::set_value(const std::string& key, const GgufValue& v) { put(key, v); }

void GgufWriter::set_alignment(uint32_t alignment) {
  TS_CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0) << "alignment must be a power of two";
  TS_CHECK(tensors_.empty()) << "set the alignment before adding tensors";
  alignment_ = alignment;
  set_u32("general.alignment", alignment);
}

size_t GgufWriter::add_tensor(const std::string& name, uint32_t ggml_type, std::vector<uint64_t> ne) {
  uint64_t block_size = 0, block_bytes = 0;
  TS_CHECK(ggml_type_layout(ggml_type, &block_size, &block_bytes)) << "unknown ggml type " << ggml_type;
  TS_CHECK(!ne.empty() && ne[0] % block_size == 0) << name << ": row not a multiple of the block size";
  uint64_t elems = 1;
  for (uint64_t d : ne) elems *= d;
  const uint64_t nbytes = elems / block_size * block_bytes;
  const uint64_t offset = align_up(data_size_, alignment_);
  data_size_ = offset + nbytes;
  tensors_.push_back(TensorDecl{name, ggml_type, std::move(ne), offset, nbytes});
  return tensors_.size() - 1;
}

uint64_t GgufWriter::tensor_nbytes(size_t i) const { return tensors_.at(i).nbytes; }

std::vector<uint8_t> GgufWriter::header_bytes(GgufLayout* layout) const {
  std::vector<uint8_t> out;
  out.reserve(4096);
  append<uint32_t>(out, 0x46554747u);  // "GGUF" read as a little-endian u32
  append<uint32_t>(out, 3);
  append<uint64_t>(out, tensors_.size());
  append<uint64_t>(out, kv_.size());
  if (layout != nullptr) layout->metadata_offset = out.size();
  for (const auto& [key, value] : kv_) {
    if (layout != nullptr) layout->kv_offsets.push_back(out.size());
    append_string(out, key);
    append<uint32_t>(out, static_cast<uint32_t>(value.type));
    append_value(out, value);
  }
  for (const TensorDecl& t : tensors_) {
    if (layout != nullptr) layout->tensor_info_offsets.push_back(out.size());
    append_string(out, t.name);
    append<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) append<uint64_t>(out, d);
    append<uint32_t>(out, t.type);
    append<uint64_t>(out, t.offset);
  }
  out.resize(align_up(out.size(), alignment_), 0);
  if (layout != nullptr) layout->data_offset = out.size();
  return out;
}

std::vector<uint8_t> GgufWriter::serialize(const std::vector<std::vector<uint8_t>>& data, GgufLayout* layout) const {
  TS_CHECK_EQ(data.size(), tensors_.size());
  std::vector<uint8_t> out = header_bytes(layout);
  const size_t base = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TS_CHECK_EQ(data[i].size(), tensors_[i].nbytes) << tensors_[i].name;
    out.resize(base + tensors_[i].offset, 0);
    out.insert(out.end(), data[i].begin(), data[i].end());
  }
  return out;
}

Status GgufWriter::write_file(const std::string& path, const Producer& producer) const {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return make_error(ErrorCode::kIoError, path + ": cannot create: " + std::strerror(errno));
  auto write = [&](const uint8_t* p, size_t n) -> Status {
    if (n > 0 && std::fwrite(p, 1, n, f.get()) != n) {
      return make_error(ErrorCode::kIoError, path + ": write failed: " + std::strerror(errno));
    }
    return ok_status();
  };
  const std::vector<uint8_t> header = header_bytes();
  TS_TRY(write(header.data(), header.size()));
  uint64_t written = 0;
  std::vector<uint8_t> buf;
  const std::vector<uint8_t> zeros(alignment_, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TS_TRY(write(zeros.data(), static_cast<size_t>(tensors_[i].offset - written)));
    buf.clear();
    producer(i, buf);
    if (buf.size() != tensors_[i].nbytes) {
      return make_error(ErrorCode::kInternal, path + ": tensor " + tensors_[i].name + " produced " +
                                                  std::to_string(buf.size()) + " bytes, expected " +
                                                  std::to_string(tensors_[i].nbytes));
    }
    TS_TRY(write(buf.data(), buf.size()));
    written = tensors_[i].offset + tensors_[i].nbytes;
  }
  if (std::fflush(f.get()) != 0) return make_error(ErrorCode::kIoError, path + ": flush failed: " + std::strerror(errno));
  return ok_status();
}

}  // namespace tessera::loaders
