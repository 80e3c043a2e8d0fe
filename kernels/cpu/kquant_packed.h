// Private: the packed Q4_K layout of PackedWeights (tessera/kernels/packed_weights.h), shared by
// the packer (packed_weights.cpp) and its AVX-512 VNNI kernel (avx512/kquant_packed_avx512.cpp).
//
// Per group of 16 rows, one super-block (256 columns) after the other, each 2304 bytes = 36
// cache lines (16 rows x 144 bytes: the file's size), every vector 64-byte aligned:
//   qs:     32 x 64 bytes, uint32 [c][k][l] (c = 0..3, k = 0..7) = bytes 32c + 4k .. + 3 of row
//           l's qs: `& 0x0F` gives its values 64c + 4k .. + 3 (sub-block 2c), `& 0xF0` 16 x its
//           values 64c + 32 + 4k .. + 3 (sub-block 2c + 1): vpdpbusd's unsigned operand.
//   scales: 3 x 64 bytes, uint32 [i][l] = dword i of row l's 12 packed scale bytes (ggml's
//           6-bit scales and mins: q4k_scale_min's unpacking runs on 16 rows' dwords at once).
//   d:      fp16 [16] (the rows' d), then fp16 [16] (their dmin): one vector.
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

// Rows [r0, r1) (r0 % 16 == 0) x tokens [t0, t1) of a Q4_K job whose `packed` is set (any
// number of tokens; Q8_K activations in job.xk): every (row, token) result bit-identical to the
// scalar oracle (dot_q4_k_q8_k: exact integers, then finish_q4_k's float operations in order).
void gemm_q4_k_packed_avx512(const QuantGemmJob& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

}  // namespace tessera::kernels::cpu
