// Private: matmul with the ggml block formats other than Q8_0 (Q4_0 ... IQ4_XS).
//
// The activations are quantized once per matmul (Q8_K blocks of 256 for Q2_K .. Q6_K and
// IQ4_XS; Q8_0-style blocks of 32 {f32 d, int8[32]} for Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL), then
// each weight row is dotted with them in integers, block by block, straight from the stored
// blocks (no f32 copy of the weights), as ggml's vec_dot_*_q8_* do. Paths: scalar (the
// oracle), AVX2, AVX-512 VNNI (vpdpbusd on 256-bit vectors), chosen by quant_gemm_plan(); all
// give bit-identical results (see finish_* below).
// On AVX-512, matmul() routes Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL to the kernels of qblock_tiles.h
// instead (same integers and float order, so bit-identical to these).
// The K-quants and IQ4_XS on AVX-512 are register tiled instead (QuantGemmJob::tiles: several
// weight rows x several activation rows per inner loop, AMX-INT8 for 16 x 16/32 where
// present for Q4_K / Q5_K / Q6_K), and the 32-value formats on AVX2 take 8-row interleaved
// tiles for batches (qblock_tiles_avx2): their block integers are exact as well and
// their float part runs the finish_* operations in the same order, vectorized across the
// tile's (row, token) pairs, so the bit-identity (and greedy decoding independent of the ISA)
// is kept rather than traded for a tolerance; it costs nothing measurable, since the integer
// work, not the float part, bounds these kernels.
// Thread-safety: quant_gemm() is called concurrently for disjoint (rows, tokens) tiles of one
// job; the job and the quantized activations are read-only by then.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessera/common/dtype.h"
#include "tessera/common/quants.h"
#include "tessera/kernels/isa.h"

namespace tessera::kernels {
class PackedWeights;
class ThreadPool;
}

namespace tessera::kernels::cpu {

bool quant_gemm_supports(DType t);  // every blocked type except Q8_0 (which has its own kernels)

enum class ActKind : uint8_t { kQ8_0 = 1, kQ8_K = 2 };

// Integer dot of one weight row (nb blocks of its type) with one quantized activation row:
// xk (Q8_K, nb super-blocks) or xq/xd (Q8_0-style, nb blocks of 32).
using QuantDotFn = float (*)(const uint8_t* w_row, const BlockQ8_K* xk, const int8_t* xq, const float* xd,
                             int64_t nb);

// The same for 4 activation rows at once: out[j] = the dot with row j (xk[j], or xq[j] / xd[j]),
// bit-identical to 4 calls of the single-row function.
using QuantDot4Fn = void (*)(const uint8_t* w_row, const BlockQ8_K* const* xk, const int8_t* const* xq,
                             const float* const* xd, int64_t nb, float* out);

struct QuantGemmJob;
// A whole (rows, tokens) tile walk that replaces the row-at-a-time loop (or null).
using QuantTileFn = void (*)(const QuantGemmJob& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

struct QuantGemmJob {
  DType w_type = DType::kQ4_0;
  const uint8_t* w = nullptr;  // row r at w + r * w_row_bytes
  size_t w_row_bytes = 0;
  int64_t cols = 0;
  ActKind act = ActKind::kQ8_K;
  const float* x = nullptr;     // f32 activations, row t at x + t * x_stride
  int64_t x_stride = 0;
  int64_t n = 0;                  // activation rows
  const BlockQ8_K* xk = nullptr;  // [n, cols / 256] (ActKind::kQ8_K)
  const int8_t* xq = nullptr;     // [n, cols] (ActKind::kQ8_0)
  const float* xd = nullptr;      // [n, cols / 32] (ActKind::kQ8_0)
  float* y = nullptr;             // row t at y + t * y_stride
  int64_t y_stride = 0;
  QuantDotFn dot_q = nullptr;                                  // integer path
  QuantDot4Fn dot_q4 = nullptr;                                // integer path, 4 rows (or null)
  QuantTileFn tiles = nullptr;                                 // register-tiled path (or null)
  void (*quantize_k)(const float*, BlockQ8_K*, int64_t) = nullptr;  // Q8_K quantizer (null: scalar)
  // Set (with tiles = its kernel, e.g. gemm_q4_k_packed_avx512): the weights' packed copy
  // (kquant_packed.h), w unused.
  const PackedWeights* packed = nullptr;
};

// Fills the path fields of job (act, dot_q, dot_q4) for the ISA.
void quant_gemm_plan(QuantGemmJob* job, Isa isa);
// Quantizes the activations of every job that needs it (once per distinct x among them, in
// buffers owned by the calling thread that stay valid until its next call) and sets the jobs'
// xk / xq / xd. Uses the pool for many rows.
void quant_gemm_prepare(QuantGemmJob* const* jobs, size_t n_jobs, ThreadPool* pool);
void quant_gemm(const QuantGemmJob& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
// The row-at-a-time loop (dot_q / dot_q4), also used by the tiled paths for their edges.
void quant_gemm_rowwise(const QuantGemmJob& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

// Register-tiled K-quant GEMM (avx512/kquant_tiles_avx512.cpp; Q2_K .. Q6_K, IQ4_XS, else null):
// tiles of 16 x 1, 8 x 2, 5 x 3 and 4 x 4 (weight rows x activation rows), each super-block unpacked
// once per tile, sub-block scales applied in int32 by vpdpwssd, the 16 pairs' block integers
// reduced together and their float part run as one vector in the order of finish_* below, so
// the results stay bit-identical to the scalar oracle.
QuantTileFn kquant_tiles_avx512(DType t);
// AVX2 8-row interleaved tiles for Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL batches (avx2/qblock_tiles_avx2.cpp;
// fewer than kQBlockBatchMinN tokens: quant_gemm_rowwise), bit-identical; else null.
QuantTileFn qblock_tiles_avx2(DType t);
// AVX2 register tiles for Q2_K .. Q6_K and IQ4_XS (avx2/kquant_tiles_avx2.cpp: 8 x 1, 4 x 2,
// 2 x 4 rows x tokens, the float part vectorized over the 8 pairs in finish_*'s order), else null.
QuantTileFn kquant_tiles_avx2(DType t);
// Its AMX-INT8 part (avx512/kquant_amx.cpp): rows [r0, r0 + 16 * n_row_tiles) x tokens
// [t0, t0 + n_tokens) (16 or 32) of a Q4_K / Q5_K / Q6_K job, bit-identical too. Available when the CPU has
// AMX and the kernel grants the tile state, unless TESSERA_KQUANT_AMX=0 (read once); the same
// switch governs the 32-value formats' AMX tiles (qblock_tiles.h qblock_amx_gemm).
bool kquant_amx_available();
// quantize_row_q8_K with AVX-512 (kquant_tiles_avx512.cpp), bit-identical.
void quantize_row_q8_K_avx512(const float* x, BlockQ8_K* y, int64_t cols);
void kquant_amx_gemm(const QuantGemmJob& job, int64_t r0, int64_t n_row_tiles, int64_t t0, int n_tokens);

// Per-block integer sums -> the running float dot `acc`, in one fixed order, shared by every
// path (quant_dot.cpp, compiled without FMA): so all ISA paths are bit-identical. sums[i] is
// block i's sum over sub-blocks of scale * (q . x) (Q6_K: with the raw 0..63 values).
inline constexpr int64_t kFinishChunk = 64;  // blocks per call of a finish function
float finish_q4_k(const uint8_t* w, const BlockQ8_K* xk, const int32_t* sums, int64_t nb, float acc);
float finish_q5_k(const uint8_t* w, const BlockQ8_K* xk, const int32_t* sums, int64_t nb, float acc);
float finish_q6_k(const uint8_t* w, const BlockQ8_K* xk, const int32_t* sums, int64_t nb, float acc);
// Q2_K: sums of (scale & 0xF) * q2 . x; Q3_K: sums of scale * (v + 4) . x (v in -4..3);
// IQ4_XS: sums of (ls - 32) * (table value . x).
float finish_q2_k(const uint8_t* w, const BlockQ8_K* xk, const int32_t* sums, int64_t nb, float acc);
float finish_q3_k(const uint8_t* w, const BlockQ8_K* xk, const int32_t* sums, int64_t nb, float acc);
float finish_iq4_xs(const uint8_t* w, const BlockQ8_K* xk, const int32_t* sums, int64_t nb, float acc);

// The 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) with Q8_0-style activations: block i's
// integers s_i (and, for Q4_1/Q5_1, x_i = the sum of its activations) enter float lane i % 8:
//   lane = fma(s_i, d_i * xd_i, lane); lane = fma(x_i, m_i * xd_i, lane)   (explicit fma)
// and the row's dot is ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). Every path follows
// exactly that order, so they agree bit for bit; the SIMD path runs 8 blocks per step.
inline float reduce_lanes(const float l[8]) { return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])); }

// The integer dots (quant_dot.cpp: scalar; avx2/quant_dot_avx2.cpp: AVX2).
float dot_q4_k_q8_k(const uint8_t* w, const BlockQ8_K* xk, const int8_t* xq, const float* xd, int64_t nb);
float dot_q5_k_q8_k(const uint8_t* w, const BlockQ8_K* xk, const int8_t* xq, const float* xd, int64_t nb);
float dot_q6_k_q8_k(const uint8_t* w, const BlockQ8_K* xk, const int8_t* xq, const float* xd, int64_t nb);
float dot_q2_k_q8_k(const uint8_t* w, const BlockQ8_K* xk, const int8_t* xq, const float* xd, int64_t nb);
float dot_q3_k_q8_k(const uint8_t* w, const BlockQ8_K* xk, const int8_t* xq, const float* xd, int64_t nb);
float dot_iq4_xs_q8_k(const uint8_t* w, const BlockQ8_K* xk, const int8_t* xq, const float* xd, int64_t nb);
float dot_q4_0_q8_0(const uint8_t* w, const BlockQ8_K* xk, const int8_t* xq, const float* xd, int64_t nb);
float dot_q4_1_q8_0(const uint8_t* w, const BlockQ8_K* xk, const int8_t* xq, const float* xd, int64_t nb);
float dot_q5_0_q8_0(const uint8_t* w, const BlockQ8_K* xk, const int8_t* xq, const float* xd, int64_t nb);
float dot_q5_1_q8_0(const uint8_t* w, const BlockQ8_K* xk, const int8_t* xq, const float* xd, int64_t nb);
float dot_iq4_nl_q8_0(const uint8_t* w, const BlockQ8_K* xk, const int8_t* xq, const float* xd, int64_t nb);
// The SIMD versions (quant_dot_simd.inc compiled as avx2/quant_dot_avx2.cpp and
// avx512/quant_dot_avx512.cpp): <name>_avx2 and <name>_avx512 for every name below.
#define TESSERA_QD_DECLARE(isa)                                                                                    \
  float dot_q4_k_q8_k_##isa(const uint8_t*, const BlockQ8_K*, const int8_t*, const float*, int64_t);             \
  float dot_q5_k_q8_k_##isa(const uint8_t*, const BlockQ8_K*, const int8_t*, const float*, int64_t);             \
  float dot_q6_k_q8_k_##isa(const uint8_t*, const BlockQ8_K*, const int8_t*, const float*, int64_t);             \
  float dot_iq4_xs_q8_k_##isa(const uint8_t*, const BlockQ8_K*, const int8_t*, const float*, int64_t);             \
  float dot_q3_k_q8_k_##isa(const uint8_t*, const BlockQ8_K*, const int8_t*, const float*, int64_t);             \
  float dot_q2_k_q8_k_##isa(const uint8_t*, const BlockQ8_K*, const int8_t*, const float*, int64_t);             \
  float dot_q4_0_q8_0_##isa(const uint8_t*, const BlockQ8_K*, const int8_t*, const float*, int64_t);             \
  float dot_q4_1_q8_0_##isa(const uint8_t*, const BlockQ8_K*, const int8_t*, const float*, int64_t);             \
  float dot_q5_0_q8_0_##isa(const uint8_t*, const BlockQ8_K*, const int8_t*, const float*, int64_t);             \
  float dot_q5_1_q8_0_##isa(const uint8_t*, const BlockQ8_K*, const int8_t*, const float*, int64_t);             \
  float dot_iq4_nl_q8_0_##isa(const uint8_t*, const BlockQ8_K*, const int8_t*, const float*, int64_t);           \
  void dot4_q4_k_q8_k_##isa(const uint8_t*, const BlockQ8_K* const*, const int8_t* const*, const float* const*,  \
                            int64_t, float*);                                                                    \
  void dot4_q5_k_q8_k_##isa(const uint8_t*, const BlockQ8_K* const*, const int8_t* const*, const float* const*,  \
                            int64_t, float*);                                                                    \
  void dot4_q6_k_q8_k_##isa(const uint8_t*, const BlockQ8_K* const*, const int8_t* const*, const float* const*,  \
                            int64_t, float*);                                                                    \
  void dot4_iq4_xs_q8_k_##isa(const uint8_t*, const BlockQ8_K* const*, const int8_t* const*, const float* const*,  \
                            int64_t, float*);                                                                    \
  void dot4_q3_k_q8_k_##isa(const uint8_t*, const BlockQ8_K* const*, const int8_t* const*, const float* const*,  \
                            int64_t, float*);                                                                    \
  void dot4_q2_k_q8_k_##isa(const uint8_t*, const BlockQ8_K* const*, const int8_t* const*, const float* const*,  \
                            int64_t, float*);                                                                    \
  void dot4_q4_0_q8_0_##isa(const uint8_t*, const BlockQ8_K* const*, const int8_t* const*, const float* const*,  \
                            int64_t, float*);                                                                    \
  void dot4_q4_1_q8_0_##isa(const uint8_t*, const BlockQ8_K* const*, const int8_t* const*, const float* const*,  \
                            int64_t, float*);                                                                    \
  void dot4_q5_0_q8_0_##isa(const uint8_t*, const BlockQ8_K* const*, const int8_t* const*, const float* const*,  \
                            int64_t, float*);                                                                    \
  void dot4_q5_1_q8_0_##isa(const uint8_t*, const BlockQ8_K* const*, const int8_t* const*, const float* const*,  \
                            int64_t, float*);                                                                    \
  void dot4_iq4_nl_q8_0_##isa(const uint8_t*, const BlockQ8_K* const*, const int8_t* const*, const float* const*, \
                              int64_t, float*);
TESSERA_QD_DECLARE(avx2)
TESSERA_QD_DECLARE(avx512)
#undef TESSERA_QD_DECLARE

}  // namespace tessera::kernels::cpu
