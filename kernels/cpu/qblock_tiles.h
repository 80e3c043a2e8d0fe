// Private: register-tiled GEMMs for the 32-value block formats Q4_0, Q4_1, Q5_0, Q5_1 and
// IQ4_NL (the model: the Q8_0 tiles of avx512/avx512_kernels.cpp). They take the Q8_0 path's
// activations (IsaKernels::quantize_q8 of the same ISA: uint8 q + 128 on AVX-512, scales
// repeated q8_scale_repeat times) and a GemmQ8Job whose w_type names the weight format.
//
// Per tile of RM weight rows x RN tokens, each pair of weight blocks is unpacked once to 64
// signed bytes and multiplied with every token's activations (vpdpbusd); the float scale work
// is one convert, one multiply and one FMA per block pair per (row, token), as for Q8_0.
//
// Numerics: the integers per block are exact (the same as the scalar oracle's, quant_dot.cpp),
// but the float accumulation runs in 16 lanes of 2 blocks each rather than the oracle's fixed
// 8-lane fma order (quant_gemm.h): results agree with the scalar path to float rounding
// (relative error ~1e-6 of the row's magnitude), not bit for bit — the price of a tile that
// does not shuffle per-block sums into lanes (that shuffle made the bit-identical path 2-3x
// slower than Q8_0's tiles). Greedy decoding therefore may differ between ISA paths where two
// logits tie to ~1e-6, exactly as for Q8_0 and the float formats.
// Thread-safety: called concurrently for disjoint (rows, tokens) tiles of one job.
#pragma once

#include <cstdint>

#include "isa_table.h"
#include "tessera/common/dtype.h"

namespace tessera::kernels::cpu {

// The formats these kernels take.
inline bool qblock_tiles_support(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 || t == DType::kIQ4_NL;
}

// AVX-512 VNNI (avx512/qblock_tiles_avx512.cpp); activations of avx512_kernels().quantize_q8.
void gemm_qblock_avx512(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

}  // namespace tessera::kernels::cpu
