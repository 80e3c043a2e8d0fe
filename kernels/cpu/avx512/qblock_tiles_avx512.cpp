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
#include "qblock_tiles.h"
#include "quant_gemm.h"
#include "tessera/common/check.h"
#include "tessera/common/quants.h"

namespace tessera::kernels::cpu {
namespace {

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The 16 nibble bytes at q0 and q1 as 64 values 0..15: [lo(q0), hi(q0), lo(q1), hi(q1)].
inline __m512i nibble_pair(const uint8_t* q0, const uint8_t* q1) {
  const __m256i both = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q1)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(q0)));
  const __m512i z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(both));
  return _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFF00FF00u, z, 4), _mm512_set1_epi8(0x0F));
}

// 0x10 in byte j where bit j of the blocks' 32-bit qh words (q0's, then q1's) is set.
inline __m512i fifth_pair(const uint8_t* qh0, const uint8_t* qh1) {
  const __mmask64 m = static_cast<__mmask64>(load_u32(qh0)) | (static_cast<__mmask64>(load_u32(qh1)) << 32);
  return _mm512_maskz_mov_epi8(m, _mm512_set1_epi8(0x10));
}

// Per format: block bytes, whether the float sums follow the scalar oracle's order, and the
// signed weights of the same block index in two rows (b0 -> bytes 0..31, b1 -> 32..63).
struct Q4_0 {
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static constexpr bool kOracleOrder = true;
  static constexpr bool kMin = false;  // Q4_1 / Q5_1: the fp16 min m at byte 2, x's block sum times m * xd
  static constexpr int kOffset = 8;  // values() = uvalues() - kOffset
  static __m512i uvalues(const uint8_t* b0, const uint8_t* b1) { return nibble_pair(b0 + 2, b1 + 2); }
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_sub_epi8(nibble_pair(b0 + 2, b1 + 2), _mm512_set1_epi8(8));
  }
};
struct Q5_0 {
  static constexpr int kBytes = sizeof(BlockQ5_0);
  static constexpr bool kOracleOrder = true;
  static constexpr bool kMin = false;
  static constexpr int kOffset = 16;
  static __m512i uvalues(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_or_si512(nibble_pair(b0 + 6, b1 + 6), fifth_pair(b0 + 2, b1 + 2));
  }
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    const __m512i v = _mm512_or_si512(nibble_pair(b0 + 6, b1 + 6), fifth_pair(b0 + 2, b1 + 2));
    return _mm512_sub_epi8(v, _mm512_set1_epi8(16));
  }
};
struct Q4_1 {
  static constexpr int kBytes = sizeof(BlockQ4_1);
  static constexpr bool kOracleOrder = true;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0;  // unsigned values 0..15
  static __m512i uvalues(const uint8_t* b0, const uint8_t* b1) { return nibble_pair(b0 + 4, b1 + 4); }
  static __m512i values(const uint8_t* b0, const uint8_t* b1) { return nibble_pair(b0 + 4, b1 + 4); }
};
struct Q5_1 {
  static constexpr int kBytes = sizeof(BlockQ5_1);
  static constexpr bool kOracleOrder = true;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0;  // unsigned values 0..31
  static __m512i uvalues(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_or_si512(nibble_pair(b0 + 8, b1 + 8), fifth_pair(b0 + 4, b1 + 4));
  }
  static __m512i values(const uint8_t* b0, const uint8_t* b1) { return uvalues(b0, b1); }
};
struct IQ4_NL {
  static constexpr int kBytes = sizeof(BlockIQ4_NL);
  static constexpr bool kOracleOrder = true;
  static constexpr bool kMin = false;
  static constexpr int kOffset = 128;
  static __m512i uvalues(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_add_epi8(values(b0, b1), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
    return _mm512_shuffle_epi8(table, nibble_pair(b0 + 2, b1 + 2));
  }
};
// Q8_0 has no bit-identity contract across ISAs (its tiles sum 2 blocks per vector already).
struct Q8_0 {
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static constexpr bool kOracleOrder = false;
  static constexpr bool kMin = false;
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)), 1);
  }
};

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

// out[k] lane l = dword k of row l, for rows given as r[i] = [row i | row i + 8] (8 dwords
// each): an 8 x 8 dword transpose inside both 256-bit halves at once.
inline void transpose16x8(const __m512i r[8], __m512i out[8]) {
  __m512i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[0..3]: rows 0-3 (and 8-11), dwords {0,4}, {1,5}, {2,6}, {3,7} per 128-bit lane pair; u[4..7]: rows 4-7.
  for (int h = 0; h < 2; ++h) {
    const __m512i* a = t + 4 * h;
    u[4 * h + 0] = _mm512_unpacklo_epi64(a[0], a[2]);
    u[4 * h + 1] = _mm512_unpackhi_epi64(a[0], a[2]);
    u[4 * h + 2] = _mm512_unpacklo_epi64(a[1], a[3]);
    u[4 * h + 3] = _mm512_unpackhi_epi64(a[1], a[3]);
  }
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm512_permutex2var_epi64(u[k], lo, u[4 + k]);
    out[k + 4] = _mm512_permutex2var_epi64(u[k], hi, u[4 + k]);
  }
}

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
