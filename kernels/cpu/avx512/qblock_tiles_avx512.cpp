// AVX-512 VNNI batched GEMM for Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and Q8_0 weights (qblock_tiles.h).
// Activations are uint8 (q + 128) with each block's scale repeated 8 times (avx512_kernels.cpp
// quantize_q8). 16 weight rows are unpacked to signed bytes and interleaved per task (pack16),
// so vpdpbusd(-128 * sum(w), x + 128 broadcast, w) gives a block's exact integer dot for 16
// rows at once; the float work is per block per 16 rows.
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "qblock_gemv.h"
#include "qblock_formats.h"
#include "qblock_packed_q8.h"
#include "qblock_tiles.h"
#include "quant_gemm.h"
#include "tessera/common/check.h"
#include "tessera/common/quants.h"

namespace tessera::kernels::cpu {
namespace {

using qblock_avx512::IQ4_NL;
using qblock_avx512::load_u16;
using qblock_avx512::load_u32;
using qblock_avx512::Q4_0;
using qblock_avx512::Q4_1;
using qblock_avx512::Q5_0;
using qblock_avx512::Q5_1;
using qblock_avx512::Q8_0;
using qblock_avx512::transpose16x8;

// ---- 16 weight rows interleaved ----------------------------------------------------------
// The weights of 16 rows are unpacked once per task into a row-interleaved layout: for block b,
// vector k holds bytes 4k..4k+3 of the block in each row (lane l = row l). Then vpdpbusd with
// the token's 4 activation bytes broadcast sums a whole block for 16 rows in 8 instructions,
// and the float work (convert, scale, FMA) is per block per 16 rows, not per block per row:
// the per-block float order of the scalar oracle costs nothing extra here (each row is a
// lane). The unpacking is repeated per task (up to 48 tokens), amortized over its tokens.
struct VecI {
  __m512i v;
};
struct VecF {
  __m512 v;
};
struct Packed16 {
  const VecI* w;     // [nb][8]
  const VecI* init;  // [nb]: -128 * (the block's weight sum), per row
  const VecF* d;     // [nb]: the rows' block scales
  const VecF* m;     // [nb]: the rows' block mins (Q4_1, Q5_1)
  const int32_t* xsum;  // [tokens of the task][nb]: each block's activation sum (Q4_1, Q5_1)
  int64_t t0;           // the task's first token (xsum's row 0)
};

template <class F>
void pack16(const GemmQ8Job& g, int64_t r, int rows, int64_t nb, VecI* w, VecI* init, VecF* d, VecF* mins) {
  alignas(32) uint16_t dh[16] = {}, mh[16] = {};
  const __m512i c128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i zero = _mm512_setzero_si512();
  const uint8_t* row[16];  // missing rows (rows < 16) read row 0 and are masked off
  for (int l = 0; l < 16; ++l) row[l] = g.w + (r + (l < rows ? l : 0)) * g.w_row_bytes;
  const __mmask16 live = rows >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << rows) - 1u);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i pairs[8], out[8];  // pairs[i] = [row i | row i + 8], unpacked together
    for (int i = 0; i < 8; ++i) pairs[i] = F::values(row[i] + b * F::kBytes, row[i + 8] + b * F::kBytes);
    for (int l = 0; l < rows; ++l) dh[l] = load_u16(row[l] + b * F::kBytes);
    if constexpr (F::kMin) {
      for (int l = 0; l < rows; ++l) mh[l] = load_u16(row[l] + b * F::kBytes + 2);
      mins[b].v = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(mh)));
    }
    transpose16x8(pairs, out);
    __m512i sum = zero;
    for (int k = 0; k < 8; ++k) {
      if (rows < 16) out[k] = _mm512_maskz_mov_epi32(live, out[k]);
      w[b * 8 + k].v = out[k];
      sum = _mm512_dpbusd_epi32(sum, c128, out[k]);
    }
    init[b].v = _mm512_sub_epi32(zero, sum);
    d[b].v = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh)));
  }
}

// Tokens [t, t + RN) x the 16 packed rows at r (rows of them real). kLanes: the float order of
// the scalar oracle (quant_gemm.h): block i into accumulator i % 8 by fma(s_i, d_i * xd_i),
// then ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) — per row lane, so the results are
// bit-identical to the scalar path's. Otherwise (Q8_0) one accumulator.
template <int RN, bool kLanes, bool kMin>
void packed_tokens(const GemmQ8Job& g, const Packed16& p, int64_t nb, int64_t r, int rows, int64_t t) {
  constexpr int kAcc = kLanes ? 8 : 1;
  __m512 acc[RN][kAcc];
  const uint8_t* xq[RN];
  const float* xd[RN];
  for (int j = 0; j < RN; ++j) {
    for (int a = 0; a < kAcc; ++a) acc[j][a] = _mm512_setzero_ps();
    xq[j] = reinterpret_cast<const uint8_t*>(g.xq) + (t + j) * g.cols;
    xd[j] = g.xd + (t + j) * nb * 8;
  }
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
    for (int i = 0; i < 8; ++i) {  // unrolled: acc[j][i] stays in a register
      const int64_t b = b0 + i;
      if (b >= nb) break;
      __m512i s[RN];
      for (int j = 0; j < RN; ++j) s[j] = p.init[b].v;
      for (int k = 0; k < 8; ++k) {
        const __m512i wv = p.w[b * 8 + k].v;
        for (int j = 0; j < RN; ++j) {
          s[j] = _mm512_dpbusd_epi32(s[j], _mm512_set1_epi32(static_cast<int>(load_u32(xq[j] + b * 32 + 4 * k))), wv);
        }
      }
      for (int j = 0; j < RN; ++j) {
        __m512& l = acc[j][kLanes ? i : 0];
        const __m512 xdv = _mm512_set1_ps(xd[j][b * 8]);
        l = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[j]), _mm512_mul_ps(p.d[b].v, xdv), l);
        if constexpr (kMin) {
          const float xs = static_cast<float>(p.xsum[(t + j - p.t0) * nb + b]);
          l = _mm512_fmadd_ps(_mm512_set1_ps(xs), _mm512_mul_ps(p.m[b].v, xdv), l);
        }
      }
    }
  }
  const __mmask16 m = rows >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << rows) - 1u);
  for (int j = 0; j < RN; ++j) {
    __m512 y = acc[j][0];
    if constexpr (kLanes) {
      const __m512* l = acc[j];
      y = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[2], l[6])),
                        _mm512_add_ps(_mm512_add_ps(l[1], l[5]), _mm512_add_ps(l[3], l[7])));
    }
    _mm512_mask_storeu_ps(g.y + (t + j) * g.y_stride + r, m, y);
  }
}

template <class F>
void gemm_packed(const GemmQ8Job& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  constexpr bool kLanes = F::kOracleOrder;
  constexpr int kRN = kLanes ? 2 : 4;  // 8 accumulators per token in the oracle's order
  const int64_t nb = g.cols / 32;
  thread_local std::vector<VecI> w, init;
  thread_local std::vector<VecF> d, m;
  thread_local std::vector<int32_t> xsum;
  w.resize(static_cast<size_t>(nb * 8));
  init.resize(static_cast<size_t>(nb));
  d.resize(static_cast<size_t>(nb));
  if constexpr (F::kMin) {
    m.resize(static_cast<size_t>(nb));
    xsum.resize(static_cast<size_t>((t1 - t0) * nb));
    for (int64_t t = t0; t < t1; ++t) {  // x is stored + 128
      const auto* xq = reinterpret_cast<const uint8_t*>(g.xq) + t * g.cols;
      for (int64_t b = 0; b < nb; ++b) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32));
        const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
        const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        xsum[static_cast<size_t>((t - t0) * nb + b)] =
            static_cast<int32_t>(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 128 * 32;
      }
    }
  }
  const Packed16 p{w.data(), init.data(), d.data(), m.data(), xsum.data(), t0};
  for (int64_t r = r0; r < r1; r += 16) {
    const int rows = static_cast<int>(std::min<int64_t>(16, r1 - r));
    pack16<F>(g, r, rows, nb, w.data(), init.data(), d.data(), m.data());
    int64_t t = t0;
    for (; t + kRN <= t1; t += kRN) packed_tokens<kRN, kLanes, F::kMin>(g, p, nb, r, rows, t);
    for (; t < t1; ++t) packed_tokens<1, kLanes, F::kMin>(g, p, nb, r, rows, t);
  }
}

template <class F>
void gemm_any(const GemmQ8Job& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  if (t1 - t0 >= kQBlockBatchMinN) {
    gemm_packed<F>(g, r0, r1, t0, t1);
  } else {
    gemv_qblock_avx512(g, r0, r1, t0, t1);  // a task's last few tokens (qblock_gemv.h)
  }
}

}  // namespace

void gemm_qblock_avx512(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  // With AMX: every 16 rows in token chunks of qblock_amx_chunk(), the rest (rows past the last
  // 16, a token tail under kQBlockAmxMinN) below.
  const int64_t n16 = (r1 - r0) / 16;
  if (n16 > 0 && t1 - t0 >= kQBlockAmxMinN && kquant_amx_available()) {
    int64_t t = t0;
    for (int c; (c = qblock_amx_chunk(t1 - t)) > 0; t += c) qblock_amx_gemm(job, r0, n16, t, c);
    if (t < t1) {  // Q8_0: the batch tiles even for 1..3 tokens, so no token's result depends on its batch
      if (job.w_type == DType::kQ8_0 && job.packed != nullptr) {
        gemm_q8_0_packed_tiles_avx512(job, r0, r0 + 16 * n16, t, t1);  // the same order, no pack16
      } else if (job.w_type == DType::kQ8_0) {
        gemm_packed<Q8_0>(job, r0, r0 + 16 * n16, t, t1);
      } else {
        gemm_qblock_avx512(job, r0, r0 + 16 * n16, t, t1);
      }
    }
    if (r0 + 16 * n16 < r1) gemm_qblock_avx512(job, r0 + 16 * n16, r1, t0, t1);
    return;
  }
  switch (job.w_type) {
    case DType::kQ4_0: gemm_any<Q4_0>(job, r0, r1, t0, t1); return;
    case DType::kQ5_0: gemm_any<Q5_0>(job, r0, r1, t0, t1); return;
    case DType::kIQ4_NL: gemm_any<IQ4_NL>(job, r0, r1, t0, t1); return;
    case DType::kQ4_1: gemm_any<Q4_1>(job, r0, r1, t0, t1); return;
    case DType::kQ5_1: gemm_any<Q5_1>(job, r0, r1, t0, t1); return;
    case DType::kQ8_0:
      if (t1 - t0 >= kQBlockBatchMinN) {
        gemm_packed<Q8_0>(job, r0, r1, t0, t1);
      } else {
        avx512_kernels().gemm_q8_0(job, r0, r1, t0, t1);
      }
      return;
    default: break;
  }
  TS_CHECK(false) << "gemm_qblock_avx512: no interleaved path for " << dtype_name(job.w_type);
}

}  // namespace tessera::kernels::cpu
