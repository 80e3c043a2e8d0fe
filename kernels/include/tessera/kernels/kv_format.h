// The element type of K/V page pools ("page dtype") and the byte format of one head row: the
// head_dim K (or V) values of one token in one kv head. The worker's KvPool stores rows in this
// format and paged_attention reads them directly (per 16-key block, into L1 scratch; the pool is
// never dequantized as a whole). docs/kv.md says when to use which.
//
//   f32   head_dim floats                                   4 bytes per value
//   f16   head_dim IEEE binary16                            2 bytes per value
//   int8  [n_groups fp16 scales][head_dim int8 codes]       ~1.06 bytes per value (group 32)
//         symmetric per group of `group` consecutive dims along head_dim:
//         scale d = fp16(max|x| / 127), q = clamp(round_half_even(x / d), -127, 127), x' = q * d
//
// Pure functions; thread-safe. encode/decode are the one scalar definition every ISA path of
// the attention kernels reproduces exactly (the kernels' oracle tests compare against them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::kernels {

enum class KvDtype : uint8_t { kF32 = 0, kF16 = 1, kInt8 = 2 };

const char* kv_dtype_name(KvDtype d);                         // "f32", "f16", "int8"
std::optional<KvDtype> parse_kv_dtype(std::string_view name);  // nullopt for anything else

struct KvRowFormat {
  KvDtype dtype = KvDtype::kF32;
  int32_t head_dim = 0;
  int32_t group = 0;  // int8: dims per scale (divides head_dim); 0 otherwise

  int32_t n_groups() const { return group > 0 ? head_dim / group : 0; }
  // Bytes of one head row (a multiple of 2; f32 rows a multiple of 4).
  size_t row_bytes() const {
    switch (dtype) {
      case KvDtype::kF16: return 2 * static_cast<size_t>(head_dim);
      case KvDtype::kInt8: return 2 * static_cast<size_t>(n_groups()) + static_cast<size_t>(head_dim);
      case KvDtype::kF32: break;
    }
    return 4 * static_cast<size_t>(head_dim);
  }
};

// The row format of `dtype` for head_dim (> 0). int8 groups: 32 when it divides head_dim, else
// 16, else 8, else the whole row.
KvRowFormat kv_row_format(KvDtype dtype, int32_t head_dim);

// One head row: head_dim floats <-> row_bytes() bytes. Non-finite inputs are the caller's bug
// (int8 maps them to 0 codes with a NaN-free scale; f16 keeps inf/NaN).
void kv_encode_row(const KvRowFormat& f, const float* x, uint8_t* dst);
void kv_decode_row(const KvRowFormat& f, const uint8_t* src, float* x);

}  // namespace tessera::kernels
