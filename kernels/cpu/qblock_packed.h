// Private: the layout of PackedWeights (tessera/kernels/packed_weights.h) shared by the packer
// (packed_weights.cpp) and its kernels (avx512/qblock_packed_avx512.cpp, avx2/qblock_packed_avx2.cpp).
//
// Per group of 16 rows, blocks in pairs: [qs b][qs b+1][meta b][meta b+1] (an odd last block
// has a zero partner). qs: 4 x 64 bytes, uint32 [4][16]: [m][l] = bytes 4m..4m+3 of row l's qs.
// meta: fp16 d[16]; Q4_1 / Q5_1 then fp16 m[16]; Q5_0 / Q5_1 then uint32 qh[16], row l's 32
// fifth bits regrouped: bit v of byte k = the bit of value 4v + k,
// so vector v's bits (v = m for the low nibbles of qs vector m, 4 + m for the high ones) land on
// 0x10 of each byte after one dword shift by 4 - v.
#pragma once

#include <cstdint>

#include "isa_table.h"
#include "tessera/common/dtype.h"

namespace tessera::kernels::cpu {

struct PackedFormat {
  bool ok = false;
  bool min = false;    // fp16 mins (Q4_1, Q5_1)
  bool fifth = false;  // qh fifth bits (Q5_0, Q5_1)
  int meta_bytes = 0;  // per block of 16 rows
};

inline PackedFormat packed_format(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kIQ4_NL: return {true, false, false, 32};
    case DType::kQ4_1: return {true, true, false, 64};
    case DType::kQ5_0: return {true, false, true, 96};
    case DType::kQ5_1: return {true, true, true, 128};
    default: return {};
  }
}
inline constexpr int kPackedQsBytes = 256;  // per block of 16 rows
inline int64_t packed_pair_bytes(const PackedFormat& f) { return 2 * (kPackedQsBytes + f.meta_bytes); }
inline int64_t packed_group_bytes(const PackedFormat& f, int64_t cols) {
  return (cols / 32 + 1) / 2 * packed_pair_bytes(f);
}
// Bit position in row qh of the value whose regrouped bit is bit v of byte k.
inline int packed_fifth_source(int v, int k) { return 4 * v + k; }

// Rows [r0, r1) (r0 % 16 == 0) x tokens [t0, t1) of a job whose `packed` is set (any number of
// tokens): the Q8_0-path activations of avx512_kernels().quantize_q8, bit-identical to the
// scalar oracle.
void gemm_qblock_packed_avx512(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
// The same on AVX2 (avx2/qblock_packed_avx2.cpp) with avx2_kernels().quantize_q8's activations.
void gemm_qblock_packed_avx2(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

}  // namespace tessera::kernels::cpu
