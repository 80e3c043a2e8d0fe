// Private: the decode GEMV (1 to 3 tokens) of the 32-value block formats Q4_0, Q4_1, Q5_0,
// Q5_1 and IQ4_NL on AVX-512 VNNI (avx512/qblock_gemv_avx512.cpp). matmul() sends such jobs of
// fewer than kQBlockBatchMinN tokens here (qblock_tiles.h has the batches), as does
// gemm_qblock_avx512 for a task's last few tokens. (Q8_0 decode stays on the ISA's gemm_q8_0:
// it is bound by the weight stream already, and its summation order is pinned by the
// llama.cpp agreement fixtures.)
//
// Two adjacent weight rows at a time (the stream stays sequential), 8 blocks per step: 4
// blocks per zmm (their 16 packed bytes side by side, the low nibbles in one vector and the
// high in another, against the activations rearranged once per task to match); the blocks'
// integer partial sums are reduced into one vector of the two rows' 8 block sums each, in
// their natural order, and the float part is one fma per 8 blocks of both rows. Lane i of a
// row's accumulator is the scalar oracle's float lane i (block b into lane b % 8,
// quant_gemm.h), and the row's dot is reduce_lanes' order: bit-identical to quant_dot.cpp.
// Short rows (SmolLM2's 576 columns = 18 blocks) waste no work on a partly filled 16-block
// group (the previous GEMV's step), and the block scales come from one gather per 8 blocks.
// Activations: GemmQ8Job's (avx512_kernels().quantize_q8: uint8 q + 128, scales repeated 8
// times). Thread-safety: called concurrently for disjoint (rows, tokens) tiles of one job;
// scratch is thread_local.
#pragma once

#include <cstdint>

#include "isa_table.h"

namespace tessera::kernels::cpu {

// Rows [r0, r1) x tokens [t0, t1), t1 - t0 <= 3, of a Q4_0, Q4_1, Q5_0, Q5_1 or IQ4_NL job.
void gemv_qblock_avx512(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

}  // namespace tessera::kernels::cpu
