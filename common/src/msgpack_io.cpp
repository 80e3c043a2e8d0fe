#include "msgpack_io.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace tessera::msgpack_io {

// ---- Writer --------------------------------------------------------------------------------

void Writer::be32(uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  raw(b, 4);
}

void Writer::begin_map() {
  out_.push_back(static_cast<char>(0xdf));
  maps_.emplace_back(out_.size(), 0);
  be32(0);
}

void Writer::end_map() {
  TS_CHECK(!maps_.empty());
  auto [off, n] = maps_.back();
  maps_.pop_back();
  out_[off] = static_cast<char>(n >> 24);
  out_[off + 1] = static_cast<char>(n >> 16);
  out_[off + 2] = static_cast<char>(n >> 8);
  out_[off + 3] = static_cast<char>(n);
}

void Writer::begin_array(uint32_t n) {
  out_.push_back(static_cast<char>(0xdd));
  be32(n);
}

void Writer::key(std::string_view k) {
  TS_CHECK(!maps_.empty()) << "key outside a map";
  ++maps_.back().second;
  str(k);
}

// Encoders write the msgpack format directly (shortest integer form, big-endian payloads).

void Writer::be(uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void Writer::str(std::string_view s) {
  const size_t n = s.size();
  if (n < 32) {
    out_.push_back(static_cast<char>(0xa0 | n));
  } else if (n <= 0xff) {
    out_.push_back(static_cast<char>(0xd9));
    be(n, 1);
  } else if (n <= 0xffff) {
    out_.push_back(static_cast<char>(0xda));
    be(n, 2);
  } else {
    out_.push_back(static_cast<char>(0xdb));
    be(n, 4);
  }
  out_.append(s);
}

void Writer::u64(uint64_t v) {
  if (v < 128) {
    out_.push_back(static_cast<char>(v));
  } else if (v <= 0xff) {
    out_.push_back(static_cast<char>(0xcc));
    be(v, 1);
  } else if (v <= 0xffff) {
    out_.push_back(static_cast<char>(0xcd));
    be(v, 2);
  } else if (v <= 0xffffffffull) {
    out_.push_back(static_cast<char>(0xce));
    be(v, 4);
  } else {
    out_.push_back(static_cast<char>(0xcf));
    be(v, 8);
  }
}

void Writer::i64(int64_t v) {
  if (v >= 0) return u64(static_cast<uint64_t>(v));
  if (v >= -32) {
    out_.push_back(static_cast<char>(v));  // negative fixint 0xe0..0xff
  } else if (v >= INT8_MIN) {
    out_.push_back(static_cast<char>(0xd0));
    be(static_cast<uint8_t>(v), 1);
  } else if (v >= INT16_MIN) {
    out_.push_back(static_cast<char>(0xd1));
    be(static_cast<uint16_t>(v), 2);
  } else if (v >= INT32_MIN) {
    out_.push_back(static_cast<char>(0xd2));
    be(static_cast<uint32_t>(v), 4);
  } else {
    out_.push_back(static_cast<char>(0xd3));
    be(static_cast<uint64_t>(v), 8);
  }
}

void Writer::f32(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  out_.push_back(static_cast<char>(0xca));
  be(bits, 4);
}

void Writer::f64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  out_.push_back(static_cast<char>(0xcb));
  be(bits, 8);
}

void Writer::boolean(bool v) { out_.push_back(static_cast<char>(v ? 0xc3 : 0xc2)); }
void Writer::nil() { out_.push_back(static_cast<char>(0xc0)); }

void Writer::i32s(const std::vector<int32_t>& v) {
  begin_array(static_cast<uint32_t>(v.size()));
  for (int32_t x : v) i64(x);
}
void Writer::i64s(const std::vector<int64_t>& v) {
  begin_array(static_cast<uint32_t>(v.size()));
  for (int64_t x : v) i64(x);
}
void Writer::u64s(const std::vector<uint64_t>& v) {
  begin_array(static_cast<uint32_t>(v.size()));
  for (uint64_t x : v) u64(x);
}
void Writer::f32s(const std::vector<float>& v) {
  begin_array(static_cast<uint32_t>(v.size()));
  for (float x : v) f32(x);
}
void Writer::strs(const std::vector<std::string>& v) {
  begin_array(static_cast<uint32_t>(v.size()));
  for (const auto& x : v) str(x);
}

void Writer::bin(std::string_view b) {
  const size_t n = b.size();
  if (n <= 0xff) {
    out_.push_back(static_cast<char>(0xc4));
    be(n, 1);
  } else if (n <= 0xffff) {
    out_.push_back(static_cast<char>(0xc5));
    be(n, 2);
  } else {
    out_.push_back(static_cast<char>(0xc6));
    be(n, 4);
  }
  out_.append(b);
}

// ---- Readers -------------------------------------------------------------------------------

std::string type_name(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL: return "nil";
    case msgpack::type::BOOLEAN: return "bool";
    case msgpack::type::POSITIVE_INTEGER: return "integer";
    case msgpack::type::NEGATIVE_INTEGER: return "negative integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return "float";
    case msgpack::type::STR: return "string";
    case msgpack::type::BIN: return "binary";
    case msgpack::type::ARRAY: return "array";
    case msgpack::type::MAP: return "map";
    case msgpack::type::EXT: return "ext";
  }
  return "unknown";
}

namespace {

Error type_error(const std::string& name, const char* expected, const msgpack::object& o) {
  return make_error(ErrorCode::kInvalidArgument,
                    "field '" + name + "' must be " + expected + " (got " + type_name(o) + ")");
}

template <class T>
Status read_int(const msgpack::object& o, const std::string& name, T* out) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<T>::max()))
      return make_error(ErrorCode::kOutOfRange, "field '" + name + "' is too large (" + std::to_string(o.via.u64) + ")");
    *out = static_cast<T>(o.via.u64);
    return ok_status();
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    if constexpr (std::is_unsigned_v<T>) {
      return make_error(ErrorCode::kOutOfRange, "field '" + name + "' must be >= 0 (got " + std::to_string(o.via.i64) + ")");
    } else {
      if (o.via.i64 < static_cast<int64_t>(std::numeric_limits<T>::min()))
        return make_error(ErrorCode::kOutOfRange, "field '" + name + "' is too small (" + std::to_string(o.via.i64) + ")");
      *out = static_cast<T>(o.via.i64);
      return ok_status();
    }
  }
  return type_error(name, "an integer", o);
}

template <class T>
Status read_float(const msgpack::object& o, const std::string& name, T* out) {
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: *out = static_cast<T>(o.via.f64); return ok_status();
    case msgpack::type::POSITIVE_INTEGER: *out = static_cast<T>(o.via.u64); return ok_status();
    case msgpack::type::NEGATIVE_INTEGER: *out = static_cast<T>(o.via.i64); return ok_status();
    default: return type_error(name, "a number", o);
  }
}

template <class T>
Status read_vec(const msgpack::object& o, const std::string& name, std::vector<T>* out) {
  if (o.type != msgpack::type::ARRAY) return type_error(name, "an array", o);
  std::vector<T> v(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    // The indexed name is built only when an element fails (this loop is hot for token lists).
    if (!read(o.via.array.ptr[i], name, &v[i]).ok()) TS_TRY(read(o.via.array.ptr[i], name + "[" + std::to_string(i) + "]", &v[i]));
  }
  *out = std::move(v);
  return ok_status();
}

}  // namespace

Status read(const msgpack::object& o, const std::string& name, uint64_t* out) { return read_int(o, name, out); }
Status read(const msgpack::object& o, const std::string& name, int64_t* out) { return read_int(o, name, out); }
Status read(const msgpack::object& o, const std::string& name, int32_t* out) { return read_int(o, name, out); }
Status read(const msgpack::object& o, const std::string& name, ErrorCode* out) {
  int32_t v = 0;
  TS_TRY(read_int(o, name, &v));
  *out = static_cast<ErrorCode>(v);  // the wire carries the integer; unknown values pass through
  return ok_status();
}
Status read(const msgpack::object& o, const std::string& name, float* out) { return read_float(o, name, out); }
Status read(const msgpack::object& o, const std::string& name, double* out) { return read_float(o, name, out); }

Status read(const msgpack::object& o, const std::string& name, bool* out) {
  if (o.type != msgpack::type::BOOLEAN) return type_error(name, "a bool", o);
  *out = o.via.boolean;
  return ok_status();
}

Status read(const msgpack::object& o, const std::string& name, std::string* out) {
  if (o.type != msgpack::type::STR) return type_error(name, "a string", o);
  out->assign(o.via.str.ptr, o.via.str.size);
  return ok_status();
}

Status read(const msgpack::object& o, const std::string& name, std::vector<int32_t>* out) { return read_vec(o, name, out); }
Status read(const msgpack::object& o, const std::string& name, std::vector<int64_t>* out) { return read_vec(o, name, out); }
Status read(const msgpack::object& o, const std::string& name, std::vector<uint64_t>* out) { return read_vec(o, name, out); }
Status read(const msgpack::object& o, const std::string& name, std::vector<float>* out) { return read_vec(o, name, out); }
Status read(const msgpack::object& o, const std::string& name, std::vector<std::string>* out) { return read_vec(o, name, out); }

Result<MapView> as_map(const msgpack::object& o, const std::string& path) {
  if (o.type != msgpack::type::MAP)
    return make_error(ErrorCode::kInvalidArgument, "'" + (path.empty() ? std::string("message") : path) +
                                                       "' must be a map (got " + type_name(o) + ")");
  return MapView(o, path);
}

const msgpack::object* MapView::find(std::string_view key) const {
  const msgpack::object_map& m = o_.via.map;
  for (uint32_t i = 0; i < m.size; ++i) {
    const msgpack::object& k = m.ptr[i].key;
    if (k.type == msgpack::type::STR && std::string_view(k.via.str.ptr, k.via.str.size) == key) {
      const msgpack::object& v = m.ptr[i].val;
      return v.type == msgpack::type::NIL ? nullptr : &v;
    }
  }
  return nullptr;
}

std::string MapView::field(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

// ---- SamplingParams ------------------------------------------------------------------------

Status read_bytes(const msgpack::object& o, const std::string& name, bool allow_bin, std::string_view* out) {
  if (o.type == msgpack::type::STR) {
    *out = std::string_view(o.via.str.ptr, o.via.str.size);
    return ok_status();
  }
  if (allow_bin && o.type == msgpack::type::BIN) {
    *out = std::string_view(o.via.bin.ptr, o.via.bin.size);
    return ok_status();
  }
  return type_error(name, allow_bin ? "bin or str" : "a string", o);
}

Result<msgpack::object_handle> unpack(std::string_view bytes, const msgpack::unpack_limit& limit, bool zero_copy) {
  try {
    auto no_copy = [](msgpack::type::object_type, size_t, void*) { return true; };
    std::size_t off = 0;
    msgpack::object_handle oh = zero_copy ? msgpack::unpack(bytes.data(), bytes.size(), off, no_copy, nullptr, limit)
                                          : msgpack::unpack(bytes.data(), bytes.size(), off, nullptr, nullptr, limit);
    if (off != bytes.size())
      return make_error(ErrorCode::kMalformedMessage,
                        std::to_string(bytes.size() - off) + " trailing bytes after the msgpack value");
    return oh;
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kMalformedMessage, std::string("not a valid msgpack message: ") + e.what());
  }
}

}  // namespace tessera::msgpack_io

namespace tessera::protocol::detail {

void write_sampling(Writer& w, const SamplingParams& s) {
  w.key("temperature"); w.f32(s.temperature);
  w.key("top_p"); w.f32(s.top_p);
  w.key("top_k"); w.i64(s.top_k);
  w.key("min_p"); w.f32(s.min_p);
  w.key("repetition_penalty"); w.f32(s.repetition_penalty);
  w.key("presence_penalty"); w.f32(s.presence_penalty);
  w.key("frequency_penalty"); w.f32(s.frequency_penalty);
  w.key("seed"); w.u64(s.seed);
  w.key("logprobs"); w.boolean(s.logprobs);
  w.key("top_logprobs"); w.i64(s.top_logprobs);
  if (!s.logit_bias.empty()) {
    w.key("logit_bias");
    w.begin_array(static_cast<uint32_t>(s.logit_bias.size()));
    for (const auto& [token, bias] : s.logit_bias) {
      w.begin_map();
      w.key("token"); w.i64(token);
      w.key("bias"); w.f32(bias);
      w.end_map();
    }
  }
  if (!s.grammar.empty()) {
    w.key("grammar"); w.str(s.grammar);
    w.key("grammar_end_tokens");
    w.begin_array(static_cast<uint32_t>(s.grammar_end_tokens.size()));
    for (int32_t t : s.grammar_end_tokens) w.i64(t);
    w.key("grammar_max_tokens"); w.i64(s.grammar_max_tokens);
  }
  if (s.prompt_logprobs >= 0) {
    w.key("prompt_logprobs"); w.i64(s.prompt_logprobs);
  }
}

Status read_sampling(const MapView& m, SamplingParams* s) {
  TS_TRY(opt(m, "temperature", &s->temperature));
  TS_TRY(opt(m, "top_p", &s->top_p));
  TS_TRY(opt(m, "top_k", &s->top_k));
  TS_TRY(opt(m, "min_p", &s->min_p));
  TS_TRY(opt(m, "repetition_penalty", &s->repetition_penalty));
  TS_TRY(opt(m, "presence_penalty", &s->presence_penalty));
  TS_TRY(opt(m, "frequency_penalty", &s->frequency_penalty));
  TS_TRY(opt(m, "seed", &s->seed));
  TS_TRY(opt(m, "logprobs", &s->logprobs));
  TS_TRY(opt(m, "top_logprobs", &s->top_logprobs));
  auto read_bias = [&](const msgpack::object& o, const std::string& path) -> Status {
    TS_ASSIGN_OR_RETURN(MapView b, as_map(o, path));
    std::pair<int32_t, float> e;
    TS_TRY(req(b, "token", &e.first));
    TS_TRY(req(b, "bias", &e.second));
    s->logit_bias.push_back(e);
    return ok_status();
  };
  TS_TRY(opt_array(m, "logit_bias", read_bias));
  TS_TRY(opt(m, "grammar", &s->grammar));
  auto read_end = [&](const msgpack::object& o, const std::string& path) -> Status {
    if (o.type != msgpack::type::POSITIVE_INTEGER || o.via.u64 > INT32_MAX)
      return make_error(ErrorCode::kInvalidArgument, path + " must be a token id");
    s->grammar_end_tokens.push_back(static_cast<int32_t>(o.via.u64));
    return ok_status();
  };
  TS_TRY(opt_array(m, "grammar_end_tokens", read_end));
  TS_TRY(opt(m, "grammar_max_tokens", &s->grammar_max_tokens));
  TS_TRY(opt(m, "prompt_logprobs", &s->prompt_logprobs));
  return ok_status();
}

}  // namespace tessera::protocol::detail
