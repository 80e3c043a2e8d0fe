// Packed K/V blob: header, codecs (none, zstd, int8/int4 group quantization + zstd, kivi, tiered), checks.
#include "tessera/kvstore/blob.h"

#include <zstd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "blob_kivi.h"
#include "blob_tiered.h"
#include "tessera/common/half.h"

namespace tessera::kvstore {
namespace {

constexpr char kMagic[4] = {'T', 'K', 'V', '1'};
constexpr size_t kChecksumOffset = 48;
constexpr size_t kTagLowOffset = 36;   // tag bytes 0-3
constexpr size_t kTagHighOffset = 56;  // tag bytes 4-11

template <class T>
void put_le(std::string& out, size_t off, T v) {
  std::memcpy(out.data() + off, &v, sizeof(T));
}
template <class T>
T get_le(std::string_view in, size_t off) {
  T v;
  std::memcpy(&v, in.data() + off, sizeof(T));
  return v;
}

uint64_t blob_checksum(std::string_view header, std::string_view payload) {
  char h[kBlobHeaderBytes];
  std::memcpy(h, header.data(), kBlobHeaderBytes);
  std::memset(h + kChecksumOffset, 0, 8);
  return xxh64(payload.data(), payload.size(), xxh64(h, kBlobHeaderBytes, 0));
}

uint32_t levels_of(Codec c) { return c == Codec::kInt8 ? 255u : 15u; }

uint64_t n_groups(uint64_t elements, uint32_t group) { return (elements + group - 1) / group; }

// Size of the quantized (pre-zstd) payload.
uint64_t quantized_bytes(Codec c, uint64_t elements, uint32_t group) {
  const uint64_t params = n_groups(elements, group) * 8;
  const uint64_t codes = c == Codec::kInt8 ? elements : (elements + 1) / 2;
  return 2 * (params + codes);
}

// Every f16 bit pattern as a float (256 KiB, built once; thread-safe static init).
const float* half_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      const uint8_t b[2] = {static_cast<uint8_t>(h), static_cast<uint8_t>(h >> 8)};
      t[h] = element_to_float(DType::kF16, b);
    }
    return t;
  }();
  return table.data();
}

void to_float(DType dtype, const uint8_t* src, uint64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kF16: {
      const float* table = half_table();
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = table[h];
      }
      return;
    }
    case DType::kBF16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
      }
      return;
    default:
      TS_CHECK(false) << "unsupported dtype reached to_float";
  }
}

void from_float(DType dtype, const float* src, uint64_t n, uint8_t* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  for (uint64_t i = 0; i < n; ++i) float_to_element(dtype, src[i], dst + 2 * i);
}

// Quantizes one region (as floats) into params + codes appended to out.
Status quantize_region(Codec c, const std::vector<float>& x, uint32_t group, const char* region,
                       std::string& out) {
  const uint64_t n = x.size();
  const uint64_t groups = n_groups(n, group);
  const float levels = static_cast<float>(levels_of(c));
  const size_t params_at = out.size();
  out.resize(out.size() + groups * 8);
  const size_t codes_at = out.size();
  out.resize(out.size() + (c == Codec::kInt8 ? n : (n + 1) / 2), '\0');
  auto* params = reinterpret_cast<uint8_t*>(out.data() + params_at);
  auto* codes = reinterpret_cast<uint8_t*>(out.data() + codes_at);
  for (uint64_t g = 0; g < groups; ++g) {
    const uint64_t begin = g * group, end = std::min<uint64_t>(n, begin + group);
    float lo = x[begin], hi = x[begin];
    for (uint64_t i = begin; i < end; ++i) {
      if (!std::isfinite(x[i])) {
        return make_error(ErrorCode::kInvalidArgument, std::string("non-finite value in ") + region +
                                                           " at element " + std::to_string(i));
      }
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    const float scale = (hi - lo) / levels;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    std::memcpy(params + g * 8, &scale, 4);
    std::memcpy(params + g * 8 + 4, &lo, 4);
    const auto max_code = static_cast<uint32_t>(levels);
    for (uint64_t i = begin; i < end; ++i) {
      // (x - lo) * inv is in [0, levels] up to rounding: round half up, then clamp.
      const auto code = static_cast<uint8_t>(std::min(static_cast<uint32_t>((x[i] - lo) * inv + 0.5f), max_code));
      if (c == Codec::kInt8) {
        codes[i] = code;
      } else {
        codes[i / 2] |= static_cast<uint8_t>((i % 2 == 0) ? code : (code << 4));
      }
    }
  }
  return ok_status();
}

// Dequantizes one region from `in` starting at *pos; advances *pos.
Status dequantize_region(Codec c, std::string_view in, size_t* pos, uint64_t n, uint32_t group,
                         float* x) {
  const uint64_t groups = n_groups(n, group);
  const auto* params = reinterpret_cast<const uint8_t*>(in.data() + *pos);
  const auto* codes = params + groups * 8;
  for (uint64_t g = 0; g < groups; ++g) {
    float scale, zero;
    std::memcpy(&scale, params + g * 8, 4);
    std::memcpy(&zero, params + g * 8 + 4, 4);
    if (!std::isfinite(scale) || !std::isfinite(zero) || scale < 0.0f) {
      return make_error(ErrorCode::kCorruptFile,
                        "kv blob: quantization group " + std::to_string(g) + " has a bad scale/zero");
    }
    const uint64_t begin = g * group, end = std::min<uint64_t>(n, begin + group);
    for (uint64_t i = begin; i < end; ++i) {
      const uint32_t q = c == Codec::kInt8 ? codes[i] : ((codes[i / 2] >> ((i % 2) * 4)) & 0xF);
      x[i] = zero + static_cast<float>(q) * scale;
    }
  }
  *pos += groups * 8 + (c == Codec::kInt8 ? n : (n + 1) / 2);
  return ok_status();
}

Result<std::string> zstd_compress(std::string_view in, int level) {
  std::string out(ZSTD_compressBound(in.size()), '\0');
  const size_t r = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), level);
  if (ZSTD_isError(r)) {
    return make_error(ErrorCode::kInternal, std::string("zstd compress: ") + ZSTD_getErrorName(r));
  }
  out.resize(r);
  return out;
}

Result<std::string> zstd_decompress(std::string_view in, uint64_t expected) {
  const unsigned long long declared = ZSTD_getFrameContentSize(in.data(), in.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: payload is not a zstd frame");
  }
  if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != expected) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: zstd frame holds " + std::to_string(declared) +
                                                   " bytes, the header implies " + std::to_string(expected));
  }
  std::string out(expected, '\0');
  const size_t r = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
  if (ZSTD_isError(r)) {
    return make_error(ErrorCode::kCorruptFile, std::string("kv blob: zstd: ") + ZSTD_getErrorName(r));
  }
  if (r != expected) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: decompressed " + std::to_string(r) +
                                                   " bytes, expected " + std::to_string(expected));
  }
  return out;
}

bool grouped(Codec c) { return c == Codec::kInt8 || c == Codec::kInt4 || c == Codec::kKivi; }

Status check_options(const EncodeOptions& o) {
  if (o.codec > Codec::kTiered) return make_error(ErrorCode::kInvalidArgument, "unknown codec");
  if (o.codec == Codec::kTiered && !(o.tiered_step > 0.0f && o.tiered_step <= 4.0f)) {
    return make_error(ErrorCode::kOutOfRange, "tiered_step must be in (0, 4] (got " + std::to_string(o.tiered_step) + ")");
  }
  if (o.codec == Codec::kTiered && !(o.tiered_decay >= 0.0f && o.tiered_decay <= 4.0f)) {
    return make_error(ErrorCode::kOutOfRange, "tiered_decay must be in [0, 4] (got " + std::to_string(o.tiered_decay) + ")");
  }
  if (o.codec == Codec::kKivi && !(o.kivi_step > 0.0f && o.kivi_step <= 4.0f)) {
    return make_error(ErrorCode::kOutOfRange, "kivi_step must be in (0, 4] (got " + std::to_string(o.kivi_step) + ")");
  }
  if (grouped(o.codec) && (o.group_size < 2 || o.group_size > 65536)) {
    return make_error(ErrorCode::kOutOfRange,
                      "group_size must be in [2, 65536] (got " + std::to_string(o.group_size) + ")");
  }
  if (o.zstd_level < 1 || o.zstd_level > 19) {
    return make_error(ErrorCode::kOutOfRange, "zstd_level must be in [1, 19] (got " + std::to_string(o.zstd_level) + ")");
  }
  return ok_status();
}

}  // namespace

const char* codec_name(Codec c) {
  switch (c) {
    case Codec::kNone: return "none";
    case Codec::kZstd: return "zstd";
    case Codec::kInt8: return "int8";
    case Codec::kInt4: return "int4";
    case Codec::kKivi: return "kivi";
    case Codec::kTiered: return "tiered";
  }
  return "unknown";
}

Result<Codec> parse_codec(std::string_view name) {
  for (Codec c : {Codec::kNone, Codec::kZstd, Codec::kInt8, Codec::kInt4, Codec::kKivi, Codec::kTiered}) {
    if (name == codec_name(c)) return c;
  }
  return make_error(ErrorCode::kInvalidArgument,
                    "unknown codec '" + std::string(name) + "' (expected none, zstd, int8, int4, kivi or tiered)");
}

size_t element_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    default: return 0;
  }
}

float element_to_float(DType dtype, const uint8_t* p) {
  if (dtype == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == DType::kBF16 ? bf16_to_f32(h) : fp16_to_f32(h);
}

void float_to_element(DType dtype, float x, uint8_t* p) {
  if (dtype == DType::kF32) {
    std::memcpy(p, &x, 4);
    return;
  }
  const uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(x) : f32_to_fp16(x);
  std::memcpy(p, &h, 2);
}

PackedKv with_dtype(PackedKv kv, DType to) {
  if (kv.dtype == to) return kv;
  PackedKv out;
  out.fingerprint = kv.fingerprint;
  out.tag = kv.tag;
  out.dtype = to;
  out.shape = kv.shape;
  const uint64_t n = kv.shape.elements_per_region();
  const size_t ei = element_bytes(kv.dtype), eo = element_bytes(to);
  out.k.resize(n * eo);
  out.v.resize(n * eo);
  for (uint64_t i = 0; i < n; ++i) {
    float_to_element(to, element_to_float(kv.dtype, kv.k.data() + i * ei), out.k.data() + i * eo);
    float_to_element(to, element_to_float(kv.dtype, kv.v.data() + i * ei), out.v.data() + i * eo);
  }
  return out;
}

size_t PackedKv::region_bytes() const { return shape.elements_per_region() * element_bytes(dtype); }

size_t PackedKv::row_offset(uint32_t layer, uint32_t token) const {
  const uint64_t row = uint64_t{shape.n_kv_heads} * shape.head_dim;
  return ((uint64_t{layer} * shape.n_tokens) + token) * row * element_bytes(dtype);
}

Result<std::string> encode_blob(const PackedKv& kv, const EncodeOptions& options) {
  TS_TRY(check_options(options));
  if (element_bytes(kv.dtype) == 0) {
    return make_error(ErrorCode::kUnsupported,
                      std::string("kv blob dtype must be f32, f16 or bf16 (got ") + dtype_name(kv.dtype) + ")");
  }
  const KvShape& s = kv.shape;
  if (s.n_layers == 0 || s.n_tokens == 0 || s.n_kv_heads == 0 || s.head_dim == 0) {
    return make_error(ErrorCode::kInvalidArgument, "kv blob shape has a zero dimension");
  }
  const size_t rb = kv.region_bytes();
  if (kv.k.size() != rb || kv.v.size() != rb) {
    return make_error(ErrorCode::kInvalidArgument,
                      "kv blob regions hold " + std::to_string(kv.k.size()) + "/" + std::to_string(kv.v.size()) +
                          " bytes, shape and dtype imply " + std::to_string(rb));
  }
  std::string payload;
  const std::string_view kview(reinterpret_cast<const char*>(kv.k.data()), rb);
  const std::string_view vview(reinterpret_cast<const char*>(kv.v.data()), rb);
  switch (options.codec) {
    case Codec::kNone:
      payload.reserve(2 * rb);
      payload.append(kview).append(vview);
      break;
    case Codec::kZstd: {
      std::string raw;
      raw.reserve(2 * rb);
      raw.append(kview).append(vview);
      TS_ASSIGN_OR_RETURN(payload, zstd_compress(raw, options.zstd_level));
      break;
    }
    case Codec::kInt8:
    case Codec::kInt4: {
      const uint64_t n = s.elements_per_region();
      std::string q;
      q.reserve(quantized_bytes(options.codec, n, options.group_size));
      std::vector<float> x(n);
      to_float(kv.dtype, kv.k.data(), n, x.data());
      TS_TRY(quantize_region(options.codec, x, options.group_size, "K", q));
      to_float(kv.dtype, kv.v.data(), n, x.data());
      TS_TRY(quantize_region(options.codec, x, options.group_size, "V", q));
      TS_ASSIGN_OR_RETURN(payload, zstd_compress(q, options.zstd_level));
      break;
    }
    case Codec::kKivi: {
      const uint64_t n = s.elements_per_region();
      std::string q;
      q.reserve(kivi::payload_bytes(s, options.group_size));
      std::vector<float> x(n);
      to_float(kv.dtype, kv.k.data(), n, x.data());
      TS_TRY(kivi::quantize_region(s, options.group_size, options.kivi_step * kivi::kKeyStepRatio, x.data(), "K", q));
      to_float(kv.dtype, kv.v.data(), n, x.data());
      TS_TRY(kivi::quantize_region(s, options.group_size, options.kivi_step, x.data(), "V", q));
      TS_ASSIGN_OR_RETURN(payload, zstd_compress(q, options.zstd_level));
      break;
    }
    case Codec::kTiered: {
      const uint64_t n = s.elements_per_region();
      std::vector<float> xk(n), xv(n);
      to_float(kv.dtype, kv.k.data(), n, xk.data());
      to_float(kv.dtype, kv.v.data(), n, xv.data());
      TS_TRY(tiered::encode(s, xk.data(), xv.data(), {.step = options.tiered_step, .recent = options.tiered_recent, .decay = options.tiered_decay}, payload));
      break;
    }
  }
  std::string out(kBlobHeaderBytes, '\0');
  std::memcpy(out.data(), kMagic, 4);
  put_le<uint16_t>(out, 4, kBlobVersion);
  put_le<uint8_t>(out, 6, static_cast<uint8_t>(kv.dtype));
  put_le<uint8_t>(out, 7, static_cast<uint8_t>(options.codec));
  put_le<uint64_t>(out, 8, kv.fingerprint);
  put_le<uint32_t>(out, 16, s.n_layers);
  put_le<uint32_t>(out, 20, s.n_tokens);
  put_le<uint32_t>(out, 24, s.n_kv_heads);
  put_le<uint32_t>(out, 28, s.head_dim);
  put_le<uint32_t>(out, 32, grouped(options.codec) ? options.group_size : 0);
  std::memcpy(out.data() + kTagLowOffset, kv.tag.data(), 4);
  put_le<uint64_t>(out, 40, payload.size());
  std::memcpy(out.data() + kTagHighOffset, kv.tag.data() + 4, 8);
  put_le<uint64_t>(out, kChecksumOffset, blob_checksum(out, payload));
  out.append(payload);
  return out;
}

Result<BlobHeader> peek_blob_header(std::string_view blob) {
  if (blob.size() < kBlobHeaderBytes) {
    return make_error(ErrorCode::kTruncatedFile, "kv blob: " + std::to_string(blob.size()) +
                                                     " bytes is shorter than the 64-byte header");
  }
  if (std::memcmp(blob.data(), kMagic, 4) != 0) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: bad magic (not a TKV1 blob)");
  }
  BlobHeader h;
  h.version = get_le<uint16_t>(blob, 4);
  if (h.version != kBlobVersion) {
    return make_error(ErrorCode::kUnsupported, "kv blob: version " + std::to_string(h.version) +
                                                   " (this build reads version 1)");
  }
  const auto dt = get_le<uint8_t>(blob, 6);
  if (dt > static_cast<uint8_t>(DType::kBF16)) {
    return make_error(ErrorCode::kUnsupported, "kv blob: dtype code " + std::to_string(dt) + " is not f32/f16/bf16");
  }
  h.dtype = static_cast<DType>(dt);
  const auto codec = get_le<uint8_t>(blob, 7);
  if (codec > static_cast<uint8_t>(Codec::kTiered)) {
    return make_error(ErrorCode::kUnsupported, "kv blob: unknown codec code " + std::to_string(codec));
  }
  h.codec = static_cast<Codec>(codec);
  h.fingerprint = get_le<uint64_t>(blob, 8);
  h.shape = {get_le<uint32_t>(blob, 16), get_le<uint32_t>(blob, 20), get_le<uint32_t>(blob, 24),
             get_le<uint32_t>(blob, 28)};
  h.group_size = get_le<uint32_t>(blob, 32);
  h.payload_bytes = get_le<uint64_t>(blob, 40);
  h.checksum = get_le<uint64_t>(blob, kChecksumOffset);
  std::memcpy(h.tag.data(), blob.data() + kTagLowOffset, 4);
  std::memcpy(h.tag.data() + 4, blob.data() + kTagHighOffset, 8);
  const KvShape& s = h.shape;
  if (s.n_layers == 0 || s.n_tokens == 0 || s.n_kv_heads == 0 || s.head_dim == 0) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: shape has a zero dimension");
  }
  uint64_t elements = 0;
  if (__builtin_mul_overflow(uint64_t{s.n_layers} * s.n_tokens, uint64_t{s.n_kv_heads} * s.head_dim, &elements) ||
      elements > (uint64_t{1} << 48)) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: shape " + std::to_string(s.n_layers) + "x" +
                                                   std::to_string(s.n_tokens) + "x" + std::to_string(s.n_kv_heads) +
                                                   "x" + std::to_string(s.head_dim) + " is absurd");
  }
  if (grouped(h.codec) ? (h.group_size < 2 || h.group_size > 65536) : h.group_size != 0) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: group_size " + std::to_string(h.group_size) +
                                                   " is invalid for codec " + codec_name(h.codec));
  }
  if (h.codec == Codec::kNone && h.payload_bytes != 2 * s.elements_per_region() * element_bytes(h.dtype)) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: uncompressed payload size does not match the shape");
  }
  if (blob.size() - kBlobHeaderBytes < h.payload_bytes) {
    return make_error(ErrorCode::kTruncatedFile, "kv blob: payload has " + std::to_string(blob.size() - kBlobHeaderBytes) +
                                                     " bytes, the header declares " + std::to_string(h.payload_bytes));
  }
  if (blob.size() - kBlobHeaderBytes > h.payload_bytes) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: " + std::to_string(blob.size() - kBlobHeaderBytes - h.payload_bytes) +
                                                   " trailing bytes after the payload");
  }
  if (h.codec == Codec::kTiered && h.payload_bytes < tiered::min_payload_bytes(s)) {
    return make_error(ErrorCode::kTruncatedFile, "kv blob: tiered payload of " + std::to_string(h.payload_bytes) +
                                                     " bytes is too short for shape " + std::to_string(s.n_layers) + "x" +
                                                     std::to_string(s.n_tokens) + "x" + std::to_string(s.n_kv_heads) + "x" +
                                                     std::to_string(s.head_dim) + " (a valid one has at least " +
                                                     std::to_string(tiered::min_payload_bytes(s)) + ")");
  }
  return h;
}

Result<BlobHeader> verify_blob(std::string_view blob) {
  TS_ASSIGN_OR_RETURN(BlobHeader h, peek_blob_header(blob));
  const uint64_t sum = blob_checksum(blob.substr(0, kBlobHeaderBytes), blob.substr(kBlobHeaderBytes));
  if (sum != h.checksum) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: checksum mismatch (corrupted header or payload)");
  }
  return h;
}

Result<PackedKv> decode_blob(std::string_view blob, const DecodeOptions& options) {
  TS_ASSIGN_OR_RETURN(BlobHeader h, verify_blob(blob));
  if (options.expected_fingerprint != 0 && h.fingerprint != options.expected_fingerprint) {
    return make_error(ErrorCode::kInvalidArgument, "kv blob is for model fingerprint " + std::to_string(h.fingerprint) +
                                                       ", expected " + std::to_string(options.expected_fingerprint));
  }
  const uint64_t n = h.shape.elements_per_region();
  const uint64_t eb = element_bytes(h.dtype);
  if (n > options.max_decoded_bytes / (2 * eb)) {
    return make_error(ErrorCode::kTooLarge, "kv blob: decoded size exceeds the limit of " +
                                                std::to_string(options.max_decoded_bytes) + " bytes");
  }
  if (options.to_f32 && n > options.max_decoded_bytes / 8) {
    return make_error(ErrorCode::kTooLarge, "kv blob: decoded f32 size exceeds the limit of " +
                                                std::to_string(options.max_decoded_bytes) + " bytes");
  }
  PackedKv kv;
  kv.fingerprint = h.fingerprint;
  kv.tag = h.tag;
  kv.dtype = options.to_f32 ? DType::kF32 : h.dtype;
  kv.shape = h.shape;
  const size_t rb = n * eb;
  const std::string_view payload = blob.substr(kBlobHeaderBytes);
  auto split = [&](std::string_view raw) {
    const auto* p = reinterpret_cast<const uint8_t*>(raw.data());
    if (options.to_f32 && h.dtype != DType::kF32) {
      kv.k.resize(n * 4);
      kv.v.resize(n * 4);
      to_float(h.dtype, p, n, reinterpret_cast<float*>(kv.k.data()));
      to_float(h.dtype, p + rb, n, reinterpret_cast<float*>(kv.v.data()));
      return;
    }
    kv.k.assign(p, p + rb);
    kv.v.assign(p + rb, p + 2 * rb);
  };
  switch (h.codec) {
    case Codec::kNone:
      split(payload);
      break;
    case Codec::kZstd: {
      TS_ASSIGN_OR_RETURN(std::string raw, zstd_decompress(payload, 2 * rb));
      split(raw);
      break;
    }
    case Codec::kInt8:
    case Codec::kInt4: {
      TS_ASSIGN_OR_RETURN(std::string q, zstd_decompress(payload, quantized_bytes(h.codec, n, h.group_size)));
      size_t pos = 0;
      if (kv.dtype == DType::kF32) {  // dequantize straight into the regions
        kv.k.resize(n * 4);
        kv.v.resize(n * 4);
        TS_TRY(dequantize_region(h.codec, q, &pos, n, h.group_size, reinterpret_cast<float*>(kv.k.data())));
        TS_TRY(dequantize_region(h.codec, q, &pos, n, h.group_size, reinterpret_cast<float*>(kv.v.data())));
        break;
      }
      std::vector<float> x(n);
      kv.k.resize(rb);
      kv.v.resize(rb);
      TS_TRY(dequantize_region(h.codec, q, &pos, n, h.group_size, x.data()));
      from_float(h.dtype, x.data(), n, kv.k.data());
      TS_TRY(dequantize_region(h.codec, q, &pos, n, h.group_size, x.data()));
      from_float(h.dtype, x.data(), n, kv.v.data());
      break;
    }
    case Codec::kKivi: {
      TS_ASSIGN_OR_RETURN(std::string q, zstd_decompress(payload, kivi::payload_bytes(h.shape, h.group_size)));
      size_t pos = 0;
      std::vector<float> x(n);
      kv.k.resize(n * element_bytes(kv.dtype));
      kv.v.resize(kv.k.size());
      TS_TRY(kivi::dequantize_region(h.shape, h.group_size, q, &pos, x.data()));
      from_float(kv.dtype, x.data(), n, kv.k.data());
      TS_TRY(kivi::dequantize_region(h.shape, h.group_size, q, &pos, x.data()));
      from_float(kv.dtype, x.data(), n, kv.v.data());
      break;
    }
    case Codec::kTiered: {  // straight into the regions: no f32 copy of the shape's size
      kv.k.resize(n * element_bytes(kv.dtype));
      kv.v.resize(kv.k.size());
      TS_TRY(tiered::decode(h.shape, payload, kv.dtype, kv.k.data(), kv.v.data()));
      break;
    }
  }
  return kv;
}

Result<CodecReport> measure_codec(const PackedKv& kv, const EncodeOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  TS_ASSIGN_OR_RETURN(std::string blob, encode_blob(kv, options));
  const auto t1 = Clock::now();
  TS_ASSIGN_OR_RETURN(PackedKv back, decode_blob(blob));
  const auto t2 = Clock::now();
  CodecReport r;
  r.codec = options.codec;
  r.group_size = grouped(options.codec) ? options.group_size : 0;
  r.raw_bytes = 2 * kv.region_bytes();
  r.encoded_bytes = blob.size();
  r.ratio = static_cast<double>(r.raw_bytes) / static_cast<double>(r.encoded_bytes);
  r.encode_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  r.decode_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
  const uint64_t n = kv.shape.elements_per_region();
  const size_t eb = element_bytes(kv.dtype);
  double sq_err = 0.0, sq_x = 0.0;
  for (const auto* pair : {&kv.k, &kv.v}) {
    const auto& orig = *pair;
    const auto& got = pair == &kv.k ? back.k : back.v;
    for (uint64_t i = 0; i < n; ++i) {
      const double a = element_to_float(kv.dtype, orig.data() + i * eb);
      const double b = element_to_float(kv.dtype, got.data() + i * eb);
      const double d = std::fabs(a - b);
      r.max_abs_error = std::max(r.max_abs_error, d);
      sq_err += d * d;
      sq_x += a * a;
    }
  }
  r.rms_error = std::sqrt(sq_err / static_cast<double>(2 * n));
  const double rms_x = std::sqrt(sq_x / static_cast<double>(2 * n));
  r.relative_error = rms_x > 0.0 ? r.rms_error / rms_x : 0.0;
  return r;
}

}  // namespace tessera::kvstore
