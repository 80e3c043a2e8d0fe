// AVX-512 VNNI register tiles for Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL weights (qblock_tiles.h).
// Activations are uint8 (q + 128) with each block's scale repeated 8 times (avx512_kernels.cpp
// quantize_q8). Two weight blocks fill one zmm: bytes 0..31 block b, 32..63 block b + 1, each
// in value order (the 16 low nibbles, then the 16 high ones). Weights w are signed bytes, so
// vpdpbusd(-128 * sum(w), x + 128, w) = sum(x * w) exactly per 4-byte group; Q4_1 / Q5_1 add
// m * dx * sum(x), sum(x) from vpdpbusd(-512, x + 128, 1).
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "qblock_tiles.h"
#include "tessera/common/check.h"
#include "tessera/common/quants.h"

namespace tessera::kernels::cpu {
namespace {

inline float hsum(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

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

// fp16 values at p0 and p1 as [f(p0) x 8, f(p1) x 8].
inline __m512 half_pair(const uint8_t* p0, const uint8_t* p1) {
  return _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(static_cast<short>(load_u16(p1))),
                                          _mm_set1_epi16(static_cast<short>(load_u16(p0)))));
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

// One block's 16 nibble bytes as 32 values 0..15 (value order: low nibbles, then high).
inline __m256i nibbles1(const uint8_t* q) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
}

// Per format: block bytes, whether it has a min (m * sum(x)), and the signed weights of the
// blocks at b0 and b1.
struct Q4_0 {
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static constexpr bool kMin = false;
  static constexpr bool kPacked = true;
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_sub_epi8(nibble_pair(b0 + 2, b1 + 2), _mm512_set1_epi8(8));
  }
  static __m256i values1(const uint8_t* b) { return _mm256_sub_epi8(nibbles1(b + 2), _mm256_set1_epi8(8)); }
};
struct Q4_1 {
  static constexpr int kBytes = sizeof(BlockQ4_1);
  static constexpr bool kMin = true;
  static constexpr bool kPacked = false;
  static __m512i values(const uint8_t* b0, const uint8_t* b1) { return nibble_pair(b0 + 4, b1 + 4); }
};
struct Q5_0 {
  static constexpr int kBytes = sizeof(BlockQ5_0);
  static constexpr bool kMin = false;
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    const __m512i v = _mm512_or_si512(nibble_pair(b0 + 6, b1 + 6), fifth_pair(b0 + 2, b1 + 2));
    return _mm512_sub_epi8(v, _mm512_set1_epi8(16));
  }
  static constexpr bool kPacked = true;
  static __m256i values1(const uint8_t* b) {
    const __m256i hi = _mm256_maskz_mov_epi8(static_cast<__mmask32>(load_u32(b + 2)), _mm256_set1_epi8(0x10));
    return _mm256_sub_epi8(_mm256_or_si256(nibbles1(b + 6), hi), _mm256_set1_epi8(16));
  }
};
struct Q5_1 {
  static constexpr int kBytes = sizeof(BlockQ5_1);
  static constexpr bool kMin = true;
  static constexpr bool kPacked = false;
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_or_si512(nibble_pair(b0 + 8, b1 + 8), fifth_pair(b0 + 4, b1 + 4));
  }
};
struct IQ4_NL {
  static constexpr int kBytes = sizeof(BlockIQ4_NL);
  static constexpr bool kMin = false;
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
    return _mm512_shuffle_epi8(table, nibble_pair(b0 + 2, b1 + 2));
  }
  static constexpr bool kPacked = true;
  static __m256i values1(const uint8_t* b) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
    return _mm256_shuffle_epi8(table, nibbles1(b + 2));
  }
};

// Software prefetch distance in bytes: several rows ahead (a SmolLM2 row is 324..864 bytes),
// so the next rows' lines are in flight while this one is multiplied. A GEMV one row at a time
// with 16 blocks of look-ahead was latency-bound (Q4_0 decode 95 tok per CPU-s at 1 thread;
// 2048 bytes: 157; 1024: 143; 3072: 150).
constexpr int64_t kPrefetchBytes = 2048;
// Q8_0 takes only the interleaved batch path (its 2-block tiles are avx512_kernels.cpp's).
struct Q8_0 {
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static constexpr bool kMin = false;
  static constexpr bool kPacked = true;
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)), 1);
  }
  static __m256i values1(const uint8_t* b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)); }
};

// One tile: rows [r, r + RM) x tokens [t, t + RN).
template <class F, int RM, int RN>
void tile(const GemmQ8Job& g, int64_t r, int64_t t) {
  const int64_t nb = g.cols / 32;
  __m512 acc[RM][RN];
  const uint8_t* w[RM];
  const uint8_t* xq[RN];
  const float* xd[RN];
  for (int i = 0; i < RM; ++i) {
    w[i] = g.w + (r + i) * g.w_row_bytes;
    for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  for (int j = 0; j < RN; ++j) {
    xq[j] = reinterpret_cast<const uint8_t*>(g.xq) + (t + j) * g.cols;
    xd[j] = g.xd + (t + j) * nb * 8;
  }
  const __m512i c128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i zero = _mm512_setzero_si512();
  // The pair step; kTail: only block b exists (odd block count), the upper half is masked off.
  auto step = [&]<bool kTail>(int64_t b) {
    const __mmask64 xm = kTail ? 0xFFFFFFFFull : ~0ull;
    const __mmask16 dm = kTail ? 0x00FF : 0xFFFF;
    __m512i xv[RN];
    __m512 xs[RN];  // kMin: per-lane partial sums of x (signed), as floats
    __m512 xdv[RN];
    for (int j = 0; j < RN; ++j) {
      xv[j] = kTail ? _mm512_maskz_loadu_epi8(xm, xq[j] + b * 32) : _mm512_loadu_si512(xq[j] + b * 32);
      xdv[j] = kTail ? _mm512_maskz_loadu_ps(dm, xd[j] + b * 8) : _mm512_loadu_ps(xd[j] + b * 8);
      if constexpr (F::kMin) {
        xs[j] = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_set1_epi32(-512), xv[j], _mm512_set1_epi8(1)));
      }
    }
    for (int i = 0; i < RM; ++i) {
      const uint8_t* b0 = w[i] + b * F::kBytes;
      const uint8_t* b1 = kTail ? b0 : b0 + F::kBytes;
      if constexpr (!kTail) _mm_prefetch(reinterpret_cast<const char*>(b0 + kPrefetchBytes), _MM_HINT_T0);
      __m512i wv = F::values(b0, b1);
      if constexpr (kTail) wv = _mm512_maskz_mov_epi8(xm, wv);
      const __m512 dw = half_pair(b0, b1);
      const __m512i nsw = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, wv));
      for (int j = 0; j < RN; ++j) {
        const __m512i d = _mm512_dpbusd_epi32(nsw, xv[j], wv);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, xdv[j]), acc[i][j]);
      }
      if constexpr (F::kMin) {
        const __m512 mw = half_pair(b0 + 2, b1 + 2);
        for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_fmadd_ps(xs[j], _mm512_mul_ps(mw, xdv[j]), acc[i][j]);
      }
    }
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) step.template operator()<false>(b);
  if (b < nb) step.template operator()<true>(b);
  for (int j = 0; j < RN; ++j) {
    float* y = g.y + (t + j) * g.y_stride + r;
    for (int i = 0; i < RM; ++i) y[i] = hsum(acc[i][j]);
  }
}

constexpr int kRM = 4, kRN = 4;
constexpr int kSmallN = 3;  // up to this many tokens: one weight row at a time (sequential stream)

template <class F>
struct Table {
  using Fn = void (*)(const GemmQ8Job&, int64_t, int64_t);
  Fn fns[kRM + 1][kRN + 1] = {};
  constexpr Table() { fill(std::make_integer_sequence<int, kRM * kRN>{}); }
  template <int... I>
  constexpr void fill(std::integer_sequence<int, I...>) {
    ((fns[I / kRN + 1][I % kRN + 1] = &tile<F, I / kRN + 1, I % kRN + 1>), ...);
  }
};

// ---- Batches (prefill, multi-sequence decode): 16 weight rows interleaved -----------------
// The weights of 16 rows are unpacked once per task into a row-interleaved layout: for block b,
// vector k holds bytes 4k..4k+3 of the block in each row (lane l = row l). Then vpdpbusd with
// the token's 4 activation bytes broadcast sums a whole block for 16 rows in 8 instructions,
// and the float work (convert, scale, FMA) is per block per 16 rows, not per block pair per
// row: ~4x fewer instructions than the 2-block tiles. The unpacking is repeated per task
// (48 tokens), amortized over its tokens.
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
void pack16(const GemmQ8Job& g, int64_t r, int rows, int64_t nb, VecI* w, VecI* init, VecF* d) {
  alignas(32) uint16_t dh[16] = {};
  const __m512i c128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i zero = _mm512_setzero_si512();
  const uint8_t* row[16];  // missing rows (rows < 16) read row 0 and are masked off
  for (int l = 0; l < 16; ++l) row[l] = g.w + (r + (l < rows ? l : 0)) * g.w_row_bytes;
  const __mmask16 live = rows >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << rows) - 1u);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i pairs[8], out[8];  // pairs[i] = [row i | row i + 8], unpacked together
    for (int i = 0; i < 8; ++i) pairs[i] = F::values(row[i] + b * F::kBytes, row[i + 8] + b * F::kBytes);
    for (int l = 0; l < rows; ++l) dh[l] = load_u16(row[l] + b * F::kBytes);
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

// Tokens [t, t + RN) x the 16 packed rows at r (rows of them real).
template <int RN>
void packed_tokens(const GemmQ8Job& g, const Packed16& p, int64_t nb, int64_t r, int rows, int64_t t) {
  __m512 acc[RN];
  const uint8_t* xq[RN];
  const float* xd[RN];
  for (int j = 0; j < RN; ++j) {
    acc[j] = _mm512_setzero_ps();
    xq[j] = reinterpret_cast<const uint8_t*>(g.xq) + (t + j) * g.cols;
    xd[j] = g.xd + (t + j) * nb * 8;
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m512i s[RN];
    for (int j = 0; j < RN; ++j) s[j] = p.init[b].v;
    for (int k = 0; k < 8; ++k) {
      const __m512i wv = p.w[b * 8 + k].v;
      for (int j = 0; j < RN; ++j) {
        s[j] = _mm512_dpbusd_epi32(s[j], _mm512_set1_epi32(static_cast<int>(load_u32(xq[j] + b * 32 + 4 * k))), wv);
      }
    }
    for (int j = 0; j < RN; ++j) {
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[j]), _mm512_mul_ps(p.d[b].v, _mm512_set1_ps(xd[j][b * 8])), acc[j]);
    }
  }
  const __mmask16 m = rows >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << rows) - 1u);
  for (int j = 0; j < RN; ++j) _mm512_mask_storeu_ps(g.y + (t + j) * g.y_stride + r, m, acc[j]);
}

constexpr int kPackRN = 4;
constexpr int64_t kPackMinN = 4;  // fewer tokens: the 2-block tiles (packing would not pay)

template <class F>
void gemm_packed(const GemmQ8Job& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t nb = g.cols / 32;
  thread_local std::vector<VecI> w, init;
  thread_local std::vector<VecF> d;
  w.resize(static_cast<size_t>(nb * 8));
  init.resize(static_cast<size_t>(nb));
  d.resize(static_cast<size_t>(nb));
  const Packed16 p{w.data(), init.data(), d.data()};
  for (int64_t r = r0; r < r1; r += 16) {
    const int rows = static_cast<int>(std::min<int64_t>(16, r1 - r));
    pack16<F>(g, r, rows, nb, w.data(), init.data(), d.data());
    int64_t t = t0;
    for (; t + kPackRN <= t1; t += kPackRN) packed_tokens<kPackRN>(g, p, nb, r, rows, t);
    switch (t1 - t) {
      case 3: packed_tokens<3>(g, p, nb, r, rows, t); break;
      case 2: packed_tokens<2>(g, p, nb, r, rows, t); break;
      case 1: packed_tokens<1>(g, p, nb, r, rows, t); break;
      default: break;
    }
  }
}

template <class F>
void gemm(const GemmQ8Job& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  static constexpr Table<F> table;
  if constexpr (F::kPacked) {
    if (t1 - t0 >= kPackMinN) {
      gemm_packed<F>(g, r0, r1, t0, t1);
      return;
    }
  }
  if (t1 - t0 <= kSmallN) {
    for (int64_t r = r0; r < r1; ++r) table.fns[1][t1 - t0](g, r, t0);
    return;
  }
  for (int64_t t = t0; t < t1; t += kRN) {
    const int64_t rn = std::min<int64_t>(kRN, t1 - t);
    for (int64_t r = r0; r < r1; r += kRM) table.fns[std::min<int64_t>(kRM, r1 - r)][rn](g, r, t);
  }
}

}  // namespace

void gemm_qblock_avx512(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  switch (job.w_type) {
    case DType::kQ4_0: gemm<Q4_0>(job, r0, r1, t0, t1); return;
    case DType::kQ4_1: gemm<Q4_1>(job, r0, r1, t0, t1); return;
    case DType::kQ5_0: gemm<Q5_0>(job, r0, r1, t0, t1); return;
    case DType::kQ5_1: gemm<Q5_1>(job, r0, r1, t0, t1); return;
    case DType::kIQ4_NL: gemm<IQ4_NL>(job, r0, r1, t0, t1); return;
    case DType::kQ8_0:
      if (t1 - t0 >= kPackMinN) {
        gemm_packed<Q8_0>(job, r0, r1, t0, t1);
      } else {
        avx512_kernels().gemm_q8_0(job, r0, r1, t0, t1);
      }
      return;
    default: break;
  }
  TS_CHECK(false) << "gemm_qblock_avx512: not a 32-value block format: " << dtype_name(job.w_type);
}

}  // namespace tessera::kernels::cpu
