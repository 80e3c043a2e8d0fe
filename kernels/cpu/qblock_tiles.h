// Private: GEMMs for the 32-value block formats Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (decode and batches) and
// for Q8_0 batches, on AVX-512 VNNI (avx512/qblock_tiles_avx512.cpp). They take
// the Q8_0 path's activations (IsaKernels::quantize_q8 of the same ISA: uint8 q + 128, scales
// repeated q8_scale_repeat times: the same integers as the scalar quantizer) and a GemmQ8Job
// whose w_type names the weight format.
//
// Per task (a row chunk x up to 48 tokens), every 16 weight rows are unpacked once into a
// row-interleaved layout (lane l of a vector = row l), then each token's block dot for all 16
// rows is 8 vpdpbusd with broadcast activation bytes, and one convert + multiply + FMA per
// block per 16 rows: ~4x fewer instructions than one row at a time (quant_gemm.h's dots).
// Where the CPU has AMX-INT8, batches of 12 or more tokens take AMX tiles instead for every 16
// rows (avx512/qblock_amx.cpp, qblock_amx_gemm below): one TDPBSSD per block and 16 x 16.
//
// Numerics: Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL are bit-identical to the scalar oracle (quant_dot.cpp): the same
// integers per block, and per row lane the oracle's fma order (block i into accumulator i % 8,
// fixed final reduction; quant_gemm.h; Q4_1 / Q5_1 add fma(block sum of x, m * xd) after each
// block, the activation sums taken from the same integers) — so greedy tokens do not depend on the ISA or on the
// batch. Q8_0's VNNI tiles sum in one fma accumulator (Q8_0 has no cross-ISA bit-identity;
// matmul_test bounds); its AMX tiles sum in the same order (bit-identical to those tiles).
// Fewer than kQBlockBatchMinN tokens (decode): qblock_gemv.h's GEMV (Q8_0: gemm_q8_0), rows in order,
// bit-identical too: interleaving 16 rows for one token would not pay. On AVX2 the same formats
// Fewer than kQBlockBatchMinN tokens (decode): a GEMV one weight row at a time (the stream
// stays sequential; 2 KiB software prefetch), two blocks per zmm, the 16 blocks' integer sums
// reduced into one vector before the float work, the oracle's 8 fma lanes held permuted —
// bit-identical too. (Interleaving 16 rows per call for one token would not pay; interleaved once
// at load it does: qblock_packed.h, used when MatmulArgs::w_packed is given.) On AVX2 the same formats
// have 8-row interleaved batch tiles (avx2/qblock_tiles_avx2.cpp, quant_gemm.h's tiles hook).
// Thread-safety: called concurrently for disjoint (rows, tokens) tiles of one job; scratch is
// thread_local.
#pragma once

#include <algorithm>
#include <cstdint>

#include "isa_table.h"
#include "tessera/common/dtype.h"

namespace tessera::kernels::cpu {

// Batches of at least this many tokens take the interleaved path (fewer: the per-row kernels).
inline constexpr int64_t kQBlockBatchMinN = 4;

// The 32-value formats with an interleaved path (Q8_0 is routed separately: it always has
// Q8_0-style activations).
inline bool qblock_tiles_support(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 || t == DType::kIQ4_NL;
}

// With AMX, a batch's tokens go to the AMX tiles in chunks of qblock_amx_chunk(remaining tokens):
// 32 (a 16-row x 32-token tile pair) while at least 28 remain, else 16 while at least
// kQBlockAmxMinN remain, 0 (the VNNI kernels take the rest) below that. An AMX tile costs the
// same however few of its 16 tokens are real, the VNNI kernels cost per token: measured on a
// Sapphire Rapids guest, 16 rows x 12 tokens is about where they break even.
inline constexpr int64_t kQBlockAmxMinN = 12;
inline int qblock_amx_chunk(int64_t remaining) {
  if (remaining >= 28) return static_cast<int>(std::min<int64_t>(32, remaining));
  if (remaining >= kQBlockAmxMinN) return static_cast<int>(std::min<int64_t>(16, remaining));
  return 0;
}

// AVX-512 VNNI; activations of avx512_kernels().quantize_q8. Fewer than kQBlockBatchMinN
// tokens in [t0, t1) go to gemv_qblock_avx512 (qblock_gemv.h), Q8_0 to avx512_kernels().gemm_q8_0. With AMX
// (kquant_amx_available(), quant_gemm.h), every 16 rows x up to 32 tokens of a batch of at
// least kQBlockAmxMinN tokens go to qblock_amx_gemm first.
void gemm_qblock_avx512(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

// AMX-INT8 tiles (avx512/qblock_amx.cpp): rows [r0, r0 + 16 * n_row_tiles) x tokens
// [t0, t0 + n_tokens) (1..32) of a gemm_qblock_avx512 job, any of the six formats, one TDPBSSD
// per 32-value block and 16 x 16 (rows x tokens); the float part runs the operations of the
// path it stands in for, in its order: Q4_0 .. IQ4_NL bit-identical to the scalar oracle
// (quant_gemm.h's dots), Q8_0 bit-identical to the VNNI Q8_0 batch tiles (one fma accumulator in
// block order; not to the scalar gemm_q8_0), so no format's result for a token depends on
// which tokens share its batch. Only where kquant_amx_available().
void qblock_amx_gemm(const GemmQ8Job& job, int64_t r0, int64_t n_row_tiles, int64_t t0, int n_tokens);

}  // namespace tessera::kernels::cpu
