// The packed K/V blob: one preference's K/V for every layer, in one K region and one V region,
// behind a self-describing header, optionally compressed or quantized.
//
// In memory (PackedKv) each region is [n_layers][n_tokens][n_kv_heads][head_dim] elements of
// `dtype`, row-major — per layer the same token-major order as a page of the worker's pool.
//
// On the wire / in storage (little-endian, 64-byte header, then the payload):
//   off size field
//    0   4  magic "TKV1"
//    4   2  version (1)
//    6   1  dtype   (tessera::DType: 0 f32, 1 f16, 2 bf16)
//    7   1  codec   (Codec below)
//    8   8  model fingerprint
//   16   4  n_layers      20 4 n_tokens      24 4 n_kv_heads      28 4 head_dim
//   32   4  group_size (int8/int4/kivi; 0 otherwise)
//   36   4  tag, bytes 0-3 (see below)
//   40   8  payload_bytes (encoded payload size; the blob is exactly 64 + payload_bytes)
//   48   8  checksum = XXH64(payload, seed = XXH64(64 header bytes with this field zeroed, 0)):
//           it covers the header and the encoded bytes as stored, so a flipped bit anywhere is
//           caught before any decompression.
//   56   8  tag, bytes 4-11
// The tag (12 bytes, all zero when unused, as in blobs written before it: these bytes were
// reserved and zero) names what the K/V are of, for the writer's own check on reading: the K/V
// offload stores the page's prefix tag there (tessera/common/kv_digest.h) and refuses a blob
// whose tag differs from the one asked for. The checksum covers it like every header byte.
//
// Codecs:
//   none  payload = K region bytes, then V region bytes (exact, bf16 bit-exact)
//   zstd  payload = zstd(K bytes ‖ V bytes) (exact)
//   int8  payload = zstd(quantized), quantized = for K then V: n_groups × {f32 scale, f32 zero}
//         then the codes. Groups are `group_size` consecutive elements of the flattened region
//         (the last one may be shorter). Asymmetric: zero = min(group), scale = (max-min)/255,
//         q = round((x - zero) / scale) in [0, 255], x' = zero + q * scale.
//   int4  as int8 with 15 levels per group and two codes per byte (low nibble first).
//   kivi  payload = zstd(quantized), per-channel blocks of group_size tokens, fp16 mean and step
//         per block, int8 codes entropy-coded by zstd (src/blob_kivi.h; docs/kv.md): the rate
//         follows EncodeOptions::kivi_step (the step as a fraction of the block's std).
//   tiered payload = own header (recent count, fine shift, flags), per (layer, head) f32 steps and
//         fp16 channel means, then range-coded per-token step exponents and integer codes
//         (src/blob_tiered.h; docs/kv.md): per-head steps of tiered_step × the head's RMS
//         deviation (K 0.15 of that), growing with the distance from the end (tiered_decay), the
//         last tiered_recent tokens 16× finer; no zstd. Old blobs (codecs 0-4, and tiered blobs
//         written before the flags, flags 0) decode unchanged.
// Quantized codecs dequantize back to the blob's dtype (f16/bf16 round to nearest even).
// Error bound per element (before the final dtype rounding): |x - x'| <= scale / 2, i.e.
// (max - min) / 510 for int8 and (max - min) / 30 for int4 of its group.
//
// Everything here is a pure function; thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/dtype.h"
#include "tessera/common/result.h"

namespace tessera::kvstore {

enum class Codec : uint8_t { kNone = 0, kZstd = 1, kInt8 = 2, kInt4 = 3, kKivi = 4, kTiered = 5 };
const char* codec_name(Codec c);                       // "none", "zstd", "int8", "int4", "kivi", "tiered"
Result<Codec> parse_codec(std::string_view name);      // inverse of codec_name

inline constexpr size_t kBlobHeaderBytes = 64;
inline constexpr uint16_t kBlobVersion = 1;

struct KvShape {
  uint32_t n_layers = 0;
  uint32_t n_tokens = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint64_t elements_per_region() const {  // elements of K (and of V)
    return uint64_t{n_layers} * n_tokens * n_kv_heads * head_dim;
  }
  bool operator==(const KvShape&) const = default;
};

// Decoded K/V. Invariant (checked by encode): k.size() == v.size() ==
// shape.elements_per_region() * element size of dtype (f32, f16 or bf16 only).
struct PackedKv {
  using Tag = std::array<uint8_t, 12>;
  uint64_t fingerprint = 0;  // model fingerprint (Model::fingerprint)
  DType dtype = DType::kF32;
  KvShape shape;
  std::vector<uint8_t> k;
  std::vector<uint8_t> v;
  Tag tag{};                 // the header's tag (see above); zero = none

  size_t region_bytes() const;  // bytes of one region implied by shape and dtype
  // Byte offset of (layer, token) in a region: rows of n_kv_heads * head_dim elements.
  size_t row_offset(uint32_t layer, uint32_t token) const;
};

struct BlobHeader {
  uint16_t version = kBlobVersion;
  DType dtype = DType::kF32;
  Codec codec = Codec::kNone;
  uint64_t fingerprint = 0;
  KvShape shape;
  uint32_t group_size = 0;
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;
  PackedKv::Tag tag{};
};

struct EncodeOptions {
  Codec codec = Codec::kZstd;
  uint32_t group_size = 64;  // int8/int4: elements; kivi: tokens per channel block; 2..65536
  float kivi_step = 0.25f;   // kivi: quantization step / the block's standard deviation, (0, 4]
  int zstd_level = 3;        // 1..19
  float tiered_step = 0.1f;     // tiered: V's step / the head's RMS deviation, (0, 4]
  uint32_t tiered_recent = 8;   // tiered: tokens at the end of the blob coded 16x finer
  // tiered: token t's step grows as (1 + its distance from the blob's end / 32)^tiered_decay
  // (at most 64x), [0, 4]; 0 = the same step for every token (the blob format of before).
  float tiered_decay = 0.0f;
};

struct DecodeOptions {
  // When non-zero, a blob for another model is refused (kInvalidArgument naming both).
  uint64_t expected_fingerprint = 0;
  uint64_t max_decoded_bytes = uint64_t{4} << 30;  // refuse absurd shapes (kTooLarge)
  // Return f32 regions whatever the blob's dtype (what a worker with an f32 page pool wants):
  // exact for f16/bf16 blobs, and quantized codecs skip the rounding to the blob's dtype.
  bool to_f32 = false;
};

// Packs kv with the chosen codec. Errors: unsupported dtype, size/shape mismatch, bad options.
Result<std::string> encode_blob(const PackedKv& kv, const EncodeOptions& options);

// Parses and validates the header only (magic, version, dtype, codec, shapes, sizes). Does not
// verify the checksum — verify_blob does.
Result<BlobHeader> peek_blob_header(std::string_view blob);

// Header checks plus the checksum over header and payload; no decompression. Cheap (~GB/s).
Result<BlobHeader> verify_blob(std::string_view blob);

// Full decode with every check: header, checksum, fingerprint, decompressed size, codec
// parameters (finite scales). Corrupt -> kCorruptFile, short -> kTruncatedFile.
Result<PackedKv> decode_blob(std::string_view blob, const DecodeOptions& options = {});

// How well a codec did on one input.
struct CodecReport {
  Codec codec = Codec::kNone;
  uint32_t group_size = 0;
  uint64_t raw_bytes = 0;      // 2 * region_bytes
  uint64_t encoded_bytes = 0;  // whole blob, header included
  double ratio = 0.0;          // raw_bytes / encoded_bytes
  double max_abs_error = 0.0;  // over K and V, in float
  double rms_error = 0.0;
  double relative_error = 0.0;  // rms_error / rms(x)
  double encode_ms = 0.0;
  double decode_ms = 0.0;
};

// Encodes, decodes and compares with the input.
Result<CodecReport> measure_codec(const PackedKv& kv, const EncodeOptions& options);

// Element conversions used by the codecs (exposed for tests and the worker).
float element_to_float(DType dtype, const uint8_t* p);
void float_to_element(DType dtype, float x, uint8_t* p);  // f16/bf16: round to nearest even
size_t element_bytes(DType dtype);                         // 4 or 2; 0 for unsupported dtypes
// The same K/V with its elements in `to` (f16/bf16 rounded to nearest even); `kv` itself,
// moved, when it already is.
PackedKv with_dtype(PackedKv kv, DType to);

// XXH64 — the blob checksum's hash.
uint64_t xxh64(const void* data, size_t len, uint64_t seed = 0);

}  // namespace tessera::kvstore
