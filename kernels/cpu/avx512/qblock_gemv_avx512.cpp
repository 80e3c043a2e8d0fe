// AVX-512 VNNI decode GEMV for Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL weights (qblock_gemv.h).
//
// Weights enter vpdpbusd as unsigned bytes u = w + kOffset (the stored 4-bit values, 5 with
// qh, IQ4_NL's table + 128), the activations as signed bytes, so a block's integer dot is
// u . x - kOffset * sum(x), with the sums taken once per task.
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <vector>

#include "qblock_gemv.h"
#include "tessera/common/check.h"
#include "tessera/common/quants.h"

namespace tessera::kernels::cpu {
namespace {

constexpr int kMaxTokens = 3;
// Software prefetch distance of the weight stream (2 KiB, as the Q8_0 GEMV and the batch kernels).
constexpr int kAhead = 2048;

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 16 packed bytes of each of `count` (1..4) blocks, block i in 128-bit lane i (zero past count).
template <int kBytes>
inline __m512i load_qs4(const uint8_t* qs, int count) {
  const auto at = [qs](int i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + i * kBytes)); };
  __m512i v = _mm512_castsi128_si512(at(0));
  if (count == 4) {
    v = _mm512_inserti32x4(v, at(1), 1);
    v = _mm512_inserti32x4(v, at(2), 2);
    return _mm512_inserti32x4(v, at(3), 3);
  }
  v = _mm512_zextsi128_si512(at(0));
  if (count > 1) v = _mm512_inserti32x4(v, at(1), 1);
  if (count > 2) v = _mm512_inserti32x4(v, at(2), 2);
  return v;
}

// The unsigned values of 4 blocks of a 4-bit format (packed bytes at qs, stride kBytes) as
// [low nibbles] and [high nibbles] (values 0..15 and 16..31 of each block).
template <int kBytes>
inline void nibbles4(const uint8_t* qs, int count, __m512i* lo, __m512i* hi) {
  const __m512i v = load_qs4<kBytes>(qs, count), m = _mm512_set1_epi8(0x0F);
  *lo = _mm512_and_si512(v, m);
  *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
}

// ... plus 16 where the blocks' 5th bit (qh, 32 bits per block) is set.
template <int kBytes>
inline void fifth4(const uint8_t* qh, int count, __m512i* lo, __m512i* hi) {
  uint64_t l = 0, h = 0;
  for (int i = 0; i < count; ++i) {
    const uint64_t q = load_u32(qh + i * kBytes);
    l |= (q & 0xFFFFu) << (16 * i);
    h |= (q >> 16) << (16 * i);
  }
  const __m512i c16 = _mm512_set1_epi8(16);
  *lo = _mm512_mask_add_epi8(*lo, static_cast<__mmask64>(l), *lo, c16);
  *hi = _mm512_mask_add_epi8(*hi, static_cast<__mmask64>(h), *hi, c16);
}

// Per format: block bytes, kOffset (u = w + kOffset), whether an fp16 min follows the scale
// (Q4_1 / Q5_1: x's block sum times m * xd), and quad(): the unsigned values of `count` (1..4)
// blocks from block pointer b, block i's low 16 values in 128-bit lane i of *lo, its high 16 in *hi.
struct Q4_0 {
  static constexpr int kBytes = sizeof(BlockQ4_0), kOffset = 8;
  static constexpr bool kMin = false;
  static void quad(const uint8_t* b, int count, __m512i* lo, __m512i* hi) { nibbles4<kBytes>(b + 2, count, lo, hi); }
};
struct Q4_1 {
  static constexpr int kBytes = sizeof(BlockQ4_1), kOffset = 0;
  static constexpr bool kMin = true;
  static void quad(const uint8_t* b, int count, __m512i* lo, __m512i* hi) { nibbles4<kBytes>(b + 4, count, lo, hi); }
};
struct Q5_0 {
  static constexpr int kBytes = sizeof(BlockQ5_0), kOffset = 16;
  static constexpr bool kMin = false;
  static void quad(const uint8_t* b, int count, __m512i* lo, __m512i* hi) {
    nibbles4<kBytes>(b + 6, count, lo, hi);
    fifth4<kBytes>(b + 2, count, lo, hi);
  }
};
struct Q5_1 {
  static constexpr int kBytes = sizeof(BlockQ5_1), kOffset = 0;
  static constexpr bool kMin = true;
  static void quad(const uint8_t* b, int count, __m512i* lo, __m512i* hi) {
    nibbles4<kBytes>(b + 8, count, lo, hi);
    fifth4<kBytes>(b + 4, count, lo, hi);
  }
};
struct IQ4_NL {
  static constexpr int kBytes = sizeof(BlockIQ4_NL), kOffset = 128;
  static constexpr bool kMin = false;
  static void quad(const uint8_t* b, int count, __m512i* lo, __m512i* hi) {
    // kIQ4NLValues + 128 (a block past `count` reads index 0: its activations are 0).
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, static_cast<char>(129), static_cast<char>(141),
                      static_cast<char>(153), static_cast<char>(166), static_cast<char>(181), static_cast<char>(197),
                      static_cast<char>(217), static_cast<char>(241)));
    nibbles4<kBytes>(b + 2, count, lo, hi);
    *lo = _mm512_shuffle_epi8(table, *lo);
    *hi = _mm512_shuffle_epi8(table, *hi);
  }
};

// One token's activations, rearranged for the rows of a task: signed bytes in quads (per 4
// blocks 64 bytes of their first 16 values, then 64 of their last 16), zero-padded to a whole number of 8-block groups, and per block
// (natural order, 0 past the end) the scale, kOffset * sum(x) and sum(x).
struct GemvX {
  int64_t t;
  const int8_t* q;
  const float* d;
  const int32_t* offset;
  const int32_t* xsum;
};

// Per 128-bit lane L: 4 dword partials of block L of a (x4) and of block L of b (y4) -> the 8
// block sums [x0 x1 x2 x3 y0 y1 y2 y3].
inline __m256i reduce_quads(__m512i a, __m512i b) {
  const __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i u = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));  // lane L: [xL yL xL yL]
  return _mm512_castsi512_si256(
      _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0), u));
}

// The fp16 values at byte offset `at` of `count` (1..8) consecutive blocks, as 8 floats.
template <int kBytes>
inline __m256 block_halves(const uint8_t* b, int at, int count) {
  const __m256i idx = _mm256_setr_epi32(0, kBytes, 2 * kBytes, 3 * kBytes, 4 * kBytes, 5 * kBytes, 6 * kBytes, 7 * kBytes);
  const __m256i raw = count == 8 ? _mm256_i32gather_epi32(reinterpret_cast<const int*>(b + at), idx, 1)
                                 : _mm256_mmask_i32gather_epi32(_mm256_setzero_si256(), static_cast<__mmask8>((1u << count) - 1u),
                                                                idx, b + at, 1);
  return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(raw));
}

// The accumulator's 8 lanes (lane i = the oracle's lane i) -> reduce_lanes' order.
inline float reduce_acc(__m256 acc) {
  const __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));  // l0+l4, l1+l5, l2+l6, l3+l7
  const __m128 u = _mm_add_ps(v, _mm_movehl_ps(v, v));  // (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
  return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

// Two rows' quads -> [row A's 8 block sums | row B's]: a0 / c0 hold row A's blocks L and 4 + L
// in 128-bit lane L, a1 / c1 row B's.
inline __m512i reduce_quads2(__m512i a0, __m512i c0, __m512i a1, __m512i c1) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a0, c0), _mm512_unpackhi_epi32(a0, c0));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a1, c1), _mm512_unpackhi_epi32(a1, c1));
  const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));  // lane L: A_L C_L A'_L C'_L
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), u);
}

// The fp16 values at byte offset `at` of `count` (1..8) consecutive blocks of two rows
// (row_bytes apart), as [row A's 8 | row B's 8] floats.
template <int kBytes>
inline __m512 block_halves2(const uint8_t* b, int64_t row_bytes, int at, int count) {
  const auto rb = static_cast<int32_t>(row_bytes);
  const __m512i idx = _mm512_setr_epi32(0, kBytes, 2 * kBytes, 3 * kBytes, 4 * kBytes, 5 * kBytes, 6 * kBytes, 7 * kBytes, rb,
                                        rb + kBytes, rb + 2 * kBytes, rb + 3 * kBytes, rb + 4 * kBytes, rb + 5 * kBytes,
                                        rb + 6 * kBytes, rb + 7 * kBytes);
  const __mmask16 live = static_cast<__mmask16>(((1u << count) - 1u) * 0x101u);
  const __m512i raw = count == 8 ? _mm512_i32gather_epi32(idx, b + at, 1)
                                 : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, b + at, 1);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw));
}

// 8 blocks of one row (R = 1) or of two adjacent rows (R = 2) for the RN tokens: acc[j] holds
// the oracle's 8 lanes of each row (R = 2: row A in the low 256 bits, row B in the high).
template <class F, int R, int RN>
inline void group4(const uint8_t* blk, int64_t row_bytes, int count, const GemvX* x, int64_t b, __m512* acc) {
  __m512i lo0[R], hi0[R], lo1[R], hi1[R];
  for (int i = 0; i < R; ++i) {
    const uint8_t* p = blk + i * row_bytes;
    for (int o = 0; o < 8 * F::kBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p) + kAhead + o, _MM_HINT_T0);
    F::quad(p, std::min(count, 4), &lo0[i], &hi0[i]);
    if (count > 4) F::quad(p + 4 * F::kBytes, count - 4, &lo1[i], &hi1[i]);
  }
  const __m512 dw = R == 2 ? block_halves2<F::kBytes>(blk, row_bytes, 0, count)
                           : _mm512_zextps256_ps512(block_halves<F::kBytes>(blk, 0, count));
  __m512 mw = _mm512_setzero_ps();
  if constexpr (F::kMin) {
    mw = R == 2 ? block_halves2<F::kBytes>(blk, row_bytes, 2, count) : _mm512_zextps256_ps512(block_halves<F::kBytes>(blk, 2, count));
  }
  const __m512i zero = _mm512_setzero_si512();
  for (int j = 0; j < RN; ++j) {
    const int8_t* q = x[j].q + b * 32;  // group b / 8: quads [lo0 hi0 lo1 hi1], 64 bytes each
    __m512i a[R], c[R];
    for (int i = 0; i < R; ++i) {
      a[i] = _mm512_dpbusd_epi32(zero, lo0[i], _mm512_loadu_si512(q));
      a[i] = _mm512_dpbusd_epi32(a[i], hi0[i], _mm512_loadu_si512(q + 64));
      c[i] = zero;
      if (count > 4) {
        c[i] = _mm512_dpbusd_epi32(zero, lo1[i], _mm512_loadu_si512(q + 128));
        c[i] = _mm512_dpbusd_epi32(c[i], hi1[i], _mm512_loadu_si512(q + 192));
      }
    }
    const __m512 xd = _mm512_broadcast_f32x8(_mm256_loadu_ps(x[j].d + b));
    const __m512i off = _mm512_broadcast_i32x8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[j].offset + b)));
    const __m512i sums = R == 2 ? reduce_quads2(a[0], c[0], a[R - 1], c[R - 1]) : _mm512_zextsi256_si512(reduce_quads(a[0], c[0]));
    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sums, off)), _mm512_mul_ps(dw, xd), acc[j]);
    if constexpr (F::kMin) {
      const __m512 xs = _mm512_cvtepi32_ps(_mm512_broadcast_i32x8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[j].xsum + b))));
      acc[j] = _mm512_fmadd_ps(xs, _mm512_mul_ps(mw, xd), acc[j]);
    }
  }
}

// Rows [r0, r1) x the RN tokens x[0 .. RN), a 4-bit format: two rows at a time (adjacent, so
// the weight stream stays sequential), the last odd row alone (the upper half of its accumulators stays 0).
template <class F, int RN>
void rows4(const GemmQ8Job& g, int64_t r0, int64_t r1, const GemvX* x) {
  const int64_t nb = g.cols / 32;
  const auto rb = static_cast<int64_t>(g.w_row_bytes);
  auto run = [&]<int R>(int64_t r) {
    const uint8_t* w = g.w + r * rb;
    __m512 acc[RN];
    for (int j = 0; j < RN; ++j) acc[j] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) group4<F, R, RN>(w + b * F::kBytes, rb, 8, x, b, acc);
    if (b < nb) group4<F, R, RN>(w + b * F::kBytes, rb, static_cast<int>(nb - b), x, b, acc);
    for (int j = 0; j < RN; ++j) {
      g.y[x[j].t * g.y_stride + r] = reduce_acc(_mm512_castps512_ps256(acc[j]));
      if constexpr (R == 2) g.y[x[j].t * g.y_stride + r + 1] = reduce_acc(_mm512_extractf32x8_ps(acc[j], 1));
    }
  };
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) run.template operator()<2>(r);
  if (r < r1) run.template operator()<1>(r);
}

// The task's activations (GemmQ8Job: uint8 q + 128, scales repeated 8 times) -> GemvX, with
// offset = kOffset * the block sums.
void prepare(const GemmQ8Job& g, int64_t t0, int n, int offset, GemvX* x) {
  const int64_t nb = g.cols / 32, padded = (nb + 7) / 8 * 8;
  thread_local std::vector<int8_t> qs;
  thread_local std::vector<float> ds;
  thread_local std::vector<int32_t> offs, sums;
  qs.assign(static_cast<size_t>(padded * 32 * n), 0);
  ds.assign(static_cast<size_t>(padded * n), 0.0f);
  offs.assign(static_cast<size_t>(padded * n), 0);
  sums.assign(static_cast<size_t>(padded * n), 0);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int j = 0; j < n; ++j) {
    const auto* xq = reinterpret_cast<const uint8_t*>(g.xq) + (t0 + j) * g.cols;
    const float* xd = g.xd + (t0 + j) * nb * 8;
    int8_t* q = qs.data() + j * padded * 32;
    float* d = ds.data() + j * padded;
    int32_t* off = offs.data() + j * padded;
    int32_t* sum = sums.data() + j * padded;
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32));
      const __m256i v = _mm256_xor_si256(u, flip);
      int8_t* dst = q + (b / 4) * 128 + (b % 4) * 16;  // block b = 4g + i: [128g + 16i, +16) and [128g + 64 + 16i, +16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(v));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 64), _mm256_extracti128_si256(v, 1));
      const __m256i sad = _mm256_sad_epu8(u, _mm256_setzero_si256());
      const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
      const int32_t s = static_cast<int32_t>(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 128 * 32;
      d[b] = xd[b * 8];
      off[b] = offset * s;
      sum[b] = s;
    }
    x[j] = {t0 + j, q, d, off, sum};
  }
}

template <class F>
void gemv4(const GemmQ8Job& g, int64_t r0, int64_t r1, int64_t t0, int n) {
  GemvX x[kMaxTokens];
  prepare(g, t0, n, F::kOffset, x);
  switch (n) {
    case 1: rows4<F, 1>(g, r0, r1, x); return;
    case 2: rows4<F, 2>(g, r0, r1, x); return;
    case 3: rows4<F, 3>(g, r0, r1, x); return;
    default: break;
  }
}

}  // namespace

void gemv_qblock_avx512(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int n = static_cast<int>(t1 - t0);
  TS_CHECK(n >= 1 && n <= kMaxTokens) << "gemv_qblock_avx512: " << n << " tokens";
  switch (job.w_type) {
    case DType::kQ4_0: gemv4<Q4_0>(job, r0, r1, t0, n); return;
    case DType::kQ4_1: gemv4<Q4_1>(job, r0, r1, t0, n); return;
    case DType::kQ5_0: gemv4<Q5_0>(job, r0, r1, t0, n); return;
    case DType::kQ5_1: gemv4<Q5_1>(job, r0, r1, t0, n); return;
    case DType::kIQ4_NL: gemv4<IQ4_NL>(job, r0, r1, t0, n); return;
    default: break;
  }
  TS_CHECK(false) << "gemv_qblock_avx512: no path for " << dtype_name(job.w_type);
}

}  // namespace tessera::kernels::cpu
