// msgpack helpers shared by every msgpack speaker (the protocol codec in common/, the kvstore's
// messages): a writer that patches map sizes after the fact (and writes bin payloads without a
// second copy), typed readers over msgpack::object that return Result errors naming the field,
// and a bounded, non-throwing unpack.
//
//   msgpack_io::Writer w;
//   w.begin_map(); w.key("v"); w.i64(1); w.key("blob"); w.bin(blob); w.end_map();
//   std::string bytes = w.take();
//
//   TS_ASSIGN_OR_RETURN(msgpack::object_handle oh, msgpack_io::unpack(bytes, limits));
//   TS_ASSIGN_OR_RETURN(msgpack_io::MapView m, msgpack_io::as_map(oh.get(), ""));
//   TS_TRY(msgpack_io::req(m, "id", &id));      // kInvalidArgument "missing required field 'id'"
//
// Errors: a field of the wrong type is kInvalidArgument, an integer out of its type's range (a
// negative one for unsigned) kOutOfRange, bytes that do not unpack kMalformedMessage.
// Ownership: MapView refers to the msgpack::object it was made from (keep the handle alive);
// with zero_copy unpack, str/bin objects point into the input bytes (keep them alive too).
// Threading: no shared state; a Writer or MapView is used by one thread at a time.
#pragma once

#define MSGPACK_NO_BOOST 1
#include <msgpack.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/common/result.h"

namespace tessera::msgpack_io {


// Writes msgpack into a string. Maps are opened with begin_map() and closed with end_map();
// their size is the number of key() calls in between (written as map32, patched at the end).
class Writer {
 public:
  void begin_map();
  void end_map();
  void begin_array(uint32_t n);
  void key(std::string_view k);
  void str(std::string_view s);
  void u64(uint64_t v);
  void i64(int64_t v);
  void f32(float v);
  void f64(double v);
  void boolean(bool v);
  void nil();
  void i32s(const std::vector<int32_t>& v);
  void i64s(const std::vector<int64_t>& v);
  void u64s(const std::vector<uint64_t>& v);
  void f32s(const std::vector<float>& v);
  void strs(const std::vector<std::string>& v);
  void bin(std::string_view b);  // msgpack bin 8/16/32
  void reserve(size_t bytes) { out_.reserve(bytes); }
  std::string take() { return std::move(out_); }

 private:
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  void be32(uint32_t v);
  void be(uint64_t v, int bytes);
  std::string out_;
  std::vector<std::pair<size_t, uint32_t>> maps_;  // (offset of the size field, key count)
};

// A view of a msgpack map with a path prefix for error messages ("plan.seqs[2]").
class MapView {
 public:
  MapView(const msgpack::object& o, std::string path) : o_(o), path_(std::move(path)) {}
  // nullptr when absent or nil (nil is treated as absent).
  const msgpack::object* find(std::string_view key) const;
  std::string field(std::string_view key) const;

 private:
  const msgpack::object& o_;
  std::string path_;
};

Result<MapView> as_map(const msgpack::object& o, const std::string& path);
std::string type_name(const msgpack::object& o);

Status read(const msgpack::object& o, const std::string& name, uint64_t* out);
Status read(const msgpack::object& o, const std::string& name, int64_t* out);
Status read(const msgpack::object& o, const std::string& name, int32_t* out);
Status read(const msgpack::object& o, const std::string& name, ErrorCode* out);  // an int32 on the wire
Status read(const msgpack::object& o, const std::string& name, float* out);
Status read(const msgpack::object& o, const std::string& name, double* out);
Status read(const msgpack::object& o, const std::string& name, bool* out);
Status read(const msgpack::object& o, const std::string& name, std::string* out);
// A str (or, with allow_bin, a bin) as a view into the object's memory.
Status read_bytes(const msgpack::object& o, const std::string& name, bool allow_bin, std::string_view* out);
Status read(const msgpack::object& o, const std::string& name, std::vector<int32_t>* out);
Status read(const msgpack::object& o, const std::string& name, std::vector<int64_t>* out);
Status read(const msgpack::object& o, const std::string& name, std::vector<uint64_t>* out);
Status read(const msgpack::object& o, const std::string& name, std::vector<float>* out);
Status read(const msgpack::object& o, const std::string& name, std::vector<std::string>* out);

// Optional field: absent/nil leaves *out unchanged.
template <class T>
Status opt(const MapView& m, std::string_view key, T* out) {
  const msgpack::object* o = m.find(key);
  if (o == nullptr) return ok_status();
  return read(*o, m.field(key), out);
}

// Required field: absent/nil is kInvalidArgument "missing required field 'x'".
template <class T>
Status req(const MapView& m, std::string_view key, T* out) {
  const msgpack::object* o = m.find(key);
  if (o == nullptr) return make_error(ErrorCode::kInvalidArgument, "missing required field '" + m.field(key) + "'");
  return read(*o, m.field(key), out);
}

// Array of elements each decoded by fn(const msgpack::object&, path) -> Status.
template <class Fn>
Status opt_array(const MapView& m, std::string_view key, Fn fn) {
  const msgpack::object* o = m.find(key);
  if (o == nullptr) return ok_status();
  const std::string name = m.field(key);
  if (o->type != msgpack::type::ARRAY)
    return make_error(ErrorCode::kInvalidArgument, "field '" + name + "' must be an array (got " + type_name(*o) + ")");
  for (uint32_t i = 0; i < o->via.array.size; ++i) {
    TS_TRY(fn(o->via.array.ptr[i], name + "[" + std::to_string(i) + "]"));
  }
  return ok_status();
}

// Unpacks one msgpack value that must span all of `bytes`, within `limit`. zero_copy: str/bin
// objects point into `bytes` instead of the handle's zone. kMalformedMessage on bad or
// trailing bytes; never throws.
Result<msgpack::object_handle> unpack(std::string_view bytes, const msgpack::unpack_limit& limit, bool zero_copy = false);

}  // namespace tessera::msgpack_io
