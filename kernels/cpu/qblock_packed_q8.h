// Private: the packed Q8_0 layout of PackedWeights (tessera/kernels/packed_weights.h), shared by
// the packer (packed_weights.cpp) and its AVX-512 VNNI kernels (avx512/qblock_packed_q8_avx512.cpp).
//
// Per group of 16 rows, blocks in pairs: [qs b][qs b+1][d b][d b+1] (an odd last block has a
// zero partner), 1088 bytes = 17 cache lines per pair, every vector 64-byte aligned.
//   qs: 8 x 64 bytes, uint32 [8][16]: [k][l] = bytes 4k..4k+3 of row l's qs, each byte xor 0x80
//       (the value + 128 as uint8: vpdpbusd's unsigned operand; the activations are the signed one).
//   d:  fp16 [16]: the rows' block scales.
// Missing rows of the last group are zeros. The size is the file's (34 bytes per row and block)
// plus that padding. A block's qs are exactly an AMX B tile (8 rows x 64 bytes, row k = dword k
// of 16 columns = weight rows): the AMX tiles read this copy too (TDPBSUD: signed activations).
//
// With signed activations x, vpdpbusd(init, w + 128, x) = sum(w * x) + 128 * sum(x) + init, so
// init = -128 * (the sum of the activations of the dword, or of the block) gives the exact
// integer dot, a per-token scalar broadcast to the 16 rows.
#pragma once

#include <cstdint>
#include <cstring>

#include "isa_table.h"

namespace tessera::kernels::cpu {

inline constexpr int kPackedQ8QsBytes = 512;                                  // per block of 16 rows
inline constexpr int kPackedQ8MetaBytes = 32;                                 // 16 fp16 scales
inline constexpr int64_t kPackedQ8PairBytes = 2 * (kPackedQ8QsBytes + kPackedQ8MetaBytes);
inline int64_t packed_q8_group_bytes(int64_t cols) { return (cols / 32 + 1) / 2 * kPackedQ8PairBytes; }

// Writes group `dst` (zeroed, packed_q8_group_bytes(cols) bytes) from its n_rows (1..16) file
// rows (Q8_0 blocks {fp16 d, int8 qs[32]}, row l at src + l * row_bytes).
inline void pack_q8_0_group(const uint8_t* src, size_t row_bytes, int n_rows, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / 32;
  for (int l = 0; l < n_rows; ++l) {
    const uint8_t* row = src + static_cast<size_t>(l) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * 34;
      uint8_t* pb = dst + (b / 2) * kPackedQ8PairBytes;
      uint8_t* qs = pb + (b % 2) * kPackedQ8QsBytes;
      uint8_t* d = pb + 2 * kPackedQ8QsBytes + (b % 2) * kPackedQ8MetaBytes;
      for (int k = 0; k < 8; ++k) {
        for (int i = 0; i < 4; ++i) qs[(k * 16 + l) * 4 + i] = static_cast<uint8_t>(blk[2 + 4 * k + i] ^ 0x80u);
      }
      std::memcpy(d + 2 * l, blk, 2);
    }
  }
}

// Rows [r0, r1) (r0 % 16 == 0) x tokens [t0, t1) of a Q8_0 job whose `packed` is set; the
// activations of avx512_kernels().quantize_q8. Bit-identical to the unpacked AVX-512 paths the
// job would otherwise take: t1 - t0 < kQBlockBatchMinN (decode) as avx512_kernels().gemm_q8_0
// (tile_q8's order), more as the VNNI batch tiles (gemm_packed<Q8_0>, and so the AMX tiles);
// kQBlockAmxMinN tokens or more on the AMX tiles below where kquant_amx_available().
void gemm_q8_0_packed_avx512(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
// The same in the batch tiles' order for any number of tokens: the token tail of an AMX batch
// (qblock_tiles.h gemm_qblock_avx512), so no token's result depends on its batch.
void gemm_q8_0_packed_tiles_avx512(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
// AMX-INT8 (avx512/qblock_amx_q8_packed.cpp): tokens in chunks of qblock_amx_chunk() (16 rows x
// up to 32 tokens, one TDPBSUD per block: the packed block is the B tile), the tail under
// kQBlockAmxMinN by gemm_q8_0_packed_tiles_avx512; the batch tiles' order. Only where
// kquant_amx_available().
void gemm_q8_0_packed_amx(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

}  // namespace tessera::kernels::cpu
