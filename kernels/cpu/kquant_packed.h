// Private: the packed Q4_K, Q5_K and Q6_K layouts of PackedWeights (tessera/kernels/packed_weights.h),
// shared by the packer (packed_weights.cpp) and its AVX-512 VNNI kernels
// (avx512/kquant_packed_avx512.cpp).
//
// Q4_K: per group of 16 rows, one super-block (256 columns) after the other, each 2304 bytes =
// 36 cache lines (16 rows x 144 bytes: the file's size), every vector 64-byte aligned:
//   qs:     32 x 64 bytes, uint32 [c][k][l] (c = 0..3, k = 0..7) = bytes 32c + 4k .. + 3 of row
//           l's qs: `& 0x0F` gives its values 64c + 4k .. + 3 (sub-block 2c), `& 0xF0` 16 x its
//           values 64c + 32 + 4k .. + 3 (sub-block 2c + 1): vpdpbusd's unsigned operand.
//   scales: 3 x 64 bytes, uint32 [i][l] = dword i of row l's 12 packed scale bytes (ggml's
//           6-bit scales and mins: q4k_scale_min's unpacking runs on 16 rows' dwords at once).
//   d:      fp16 [16] (the rows' d), then fp16 [16] (their dmin): one vector.
// Q6_K: likewise, each super-block 3392 bytes = 53 cache lines (16 rows x 210 bytes, the file's
// size, + 32 bytes of padding):
//   ql:     32 x 64 bytes, uint32 [v][l] = bytes 4v .. 4v + 3 of row l's ql;
//   qh:     16 x 64 bytes, uint32 [u][l] = bytes 4u .. 4u + 3 of row l's qh;
//   scales: 4 x 64 bytes, uint32 [i][l] = bytes 4i .. 4i + 3 of row l's int8 scales;
//   d:      fp16 [16], then 32 zero bytes.
//   The values 128h + 32k + 4q .. + 3 (h = 0..1, k = 0..3, q = 0..7) of the 16 rows are the
//   low (k < 2) or high nibbles of ql vector 16h + 8(k % 2) + q, or'ed with bits 2k, 2k + 1 of
//   qh vector 8h + q at 0x30: ggml's layout (quant_dot.cpp), moved only.
// Missing rows of the last group are zeros.
#pragma once

#include <cstdint>
#include <cstring>

#include "isa_table.h"
#include "tessera/common/quants.h"

namespace tessera::kernels::cpu {

struct QuantGemmJob;

inline constexpr int kPackedQ4KQsBytes = 2048;                                   // per super-block of 16 rows
inline constexpr int kPackedQ4KScalesOffset = kPackedQ4KQsBytes;                 // 3 x 64 bytes
inline constexpr int kPackedQ4KDOffset = kPackedQ4KScalesOffset + 192;           // 64 bytes
inline constexpr int64_t kPackedQ4KBlockBytes = kPackedQ4KDOffset + 64;          // 2304
inline int64_t packed_q4_k_group_bytes(int64_t cols) { return cols / kQK_K * kPackedQ4KBlockBytes; }

// Writes group `dst` (zeroed, packed_q4_k_group_bytes(cols) bytes) from its n_rows (1..16) file
// rows (BlockQ4_K, row l at src + l * row_bytes).
inline void pack_q4_k_group(const uint8_t* src, size_t row_bytes, int n_rows, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / kQK_K;
  for (int l = 0; l < n_rows; ++l) {
    const auto* row = reinterpret_cast<const BlockQ4_K*>(src + static_cast<size_t>(l) * row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ4_K& q = row[b];
      uint8_t* pb = dst + b * kPackedQ4KBlockBytes;
      for (int v = 0; v < 32; ++v) std::memcpy(pb + (v * 16 + l) * 4, q.qs + 4 * v, 4);
      for (int i = 0; i < 3; ++i) std::memcpy(pb + kPackedQ4KScalesOffset + (i * 16 + l) * 4, q.scales + 4 * i, 4);
      std::memcpy(pb + kPackedQ4KDOffset + 2 * l, &q.d, 2);
      std::memcpy(pb + kPackedQ4KDOffset + 32 + 2 * l, &q.dmin, 2);
    }
  }
}

// Q5_K: Q4_K's layout with the rows' qh (32 bytes) as 8 vectors [k][l] = bytes 4k .. 4k + 3 of
// row l's qh between qs and scales: 2816 bytes = 16 x 176, the file's size.
inline constexpr int kPackedQ5KQhOffset = kPackedQ4KQsBytes;                      // 8 x 64 bytes
inline constexpr int kPackedQ5KScalesOffset = kPackedQ5KQhOffset + 512;           // 3 x 64 bytes
inline constexpr int kPackedQ5KDOffset = kPackedQ5KScalesOffset + 192;            // 64 bytes
inline constexpr int64_t kPackedQ5KBlockBytes = kPackedQ5KDOffset + 64;           // 2816
inline void pack_q5_k_group(const uint8_t* src, size_t row_bytes, int n_rows, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / kQK_K;
  for (int l = 0; l < n_rows; ++l) {
    const auto* row = reinterpret_cast<const BlockQ5_K*>(src + static_cast<size_t>(l) * row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ5_K& q = row[b];
      uint8_t* pb = dst + b * kPackedQ5KBlockBytes;
      for (int v = 0; v < 32; ++v) std::memcpy(pb + (v * 16 + l) * 4, q.qs + 4 * v, 4);
      for (int k = 0; k < 8; ++k) std::memcpy(pb + kPackedQ5KQhOffset + (k * 16 + l) * 4, q.qh + 4 * k, 4);
      for (int i = 0; i < 3; ++i) std::memcpy(pb + kPackedQ5KScalesOffset + (i * 16 + l) * 4, q.scales + 4 * i, 4);
      std::memcpy(pb + kPackedQ5KDOffset + 2 * l, &q.d, 2);
      std::memcpy(pb + kPackedQ5KDOffset + 32 + 2 * l, &q.dmin, 2);
    }
  }
}

inline constexpr int kPackedQ6KQhOffset = 2048;                                 // 16 x 64 bytes
inline constexpr int kPackedQ6KScalesOffset = kPackedQ6KQhOffset + 1024;        // 4 x 64 bytes
inline constexpr int kPackedQ6KDOffset = kPackedQ6KScalesOffset + 256;          // 64 bytes
inline constexpr int64_t kPackedQ6KBlockBytes = kPackedQ6KDOffset + 64;         // 3392
inline int64_t packed_q6_k_group_bytes(int64_t cols) { return cols / kQK_K * kPackedQ6KBlockBytes; }

inline void pack_q6_k_group(const uint8_t* src, size_t row_bytes, int n_rows, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / kQK_K;
  for (int l = 0; l < n_rows; ++l) {
    const auto* row = reinterpret_cast<const BlockQ6_K*>(src + static_cast<size_t>(l) * row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ6_K& q = row[b];
      uint8_t* pb = dst + b * kPackedQ6KBlockBytes;
      for (int v = 0; v < 32; ++v) std::memcpy(pb + (v * 16 + l) * 4, q.ql + 4 * v, 4);
      for (int u = 0; u < 16; ++u) std::memcpy(pb + kPackedQ6KQhOffset + (u * 16 + l) * 4, q.qh + 4 * u, 4);
      for (int i = 0; i < 4; ++i) std::memcpy(pb + kPackedQ6KScalesOffset + (i * 16 + l) * 4, q.scales + 4 * i, 4);
      std::memcpy(pb + kPackedQ6KDOffset + 2 * l, &q.d, 2);
    }
  }
}

// Rows [r0, r1) (r0 % 16 == 0) x tokens [t0, t1) of a Q4_K job whose `packed` is set (any
// number of tokens; Q8_K activations in job.xk): every (row, token) result bit-identical to the
// scalar oracle (dot_q4_k_q8_k: exact integers, then finish_q4_k's float operations in order).
void gemm_q4_k_packed_avx512(const QuantGemmJob& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
// The same for Q5_K (dot_q5_k_q8_k, finish_q5_k) and Q6_K (dot_q6_k_q8_k, finish_q6_k).
void gemm_q5_k_packed_avx512(const QuantGemmJob& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void gemm_q6_k_packed_avx512(const QuantGemmJob& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
// The packed kernel of t (Q4_K, Q5_K, Q6_K), else null; and the bytes of one group of 16 rows.
using PackedKquantFn = void (*)(const QuantGemmJob&, int64_t, int64_t, int64_t, int64_t);
inline PackedKquantFn packed_kquant_kernel(DType t) {
  return t == DType::kQ4_K   ? gemm_q4_k_packed_avx512
         : t == DType::kQ5_K ? gemm_q5_k_packed_avx512
         : t == DType::kQ6_K ? gemm_q6_k_packed_avx512
                             : nullptr;
}
inline int64_t packed_kquant_group_bytes(DType t, int64_t cols) {
  return t == DType::kQ4_K   ? packed_q4_k_group_bytes(cols)
         : t == DType::kQ5_K ? cols / kQK_K * kPackedQ5KBlockBytes
                             : packed_q6_k_group_bytes(cols);
}
inline void pack_kquant_group(DType t, const uint8_t* src, size_t row_bytes, int n_rows, int64_t cols, uint8_t* dst) {
  if (t == DType::kQ4_K) {
    pack_q4_k_group(src, row_bytes, n_rows, cols, dst);
  } else if (t == DType::kQ5_K) {
    pack_q5_k_group(src, row_bytes, n_rows, cols, dst);
  } else {
    pack_q6_k_group(src, row_bytes, n_rows, cols, dst);
  }
}

}  // namespace tessera::kernels::cpu
