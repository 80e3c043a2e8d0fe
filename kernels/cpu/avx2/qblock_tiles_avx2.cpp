// AVX2 batched GEMM for the 32-value formats Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (quant_gemm.h's
// QuantGemmJob::tiles; the AVX2 counterpart of avx512/qblock_tiles_avx512.cpp). Compiled with
// -mavx2 -mfma -mf16c; run only when isa_supported(Isa::kAvx2).
//
// Per task (a row chunk x up to 48 tokens), every 8 weight rows are unpacked once into a
// row-interleaved layout (lane l of a vector = row l; vector k of block b holds bytes
// 4k..4k+3 of block b of each row), as unsigned values u = w + offset (0..31). A token's block
// dot for the 8 rows is then 8 maddubs (u x the token's 4 activation bytes broadcast) whose
// int16 pair sums are added before one madd (Q4: 8 x 2 x 15 x 127 < 32767; Q5: 4 at a time),
// minus offset * (the block's activation sum): the exact integers of the scalar oracle
// (quant_dot.cpp), with no horizontal reduction. IQ4_NL's table values (|v| <= 127) take
// maddubs(|w|, sign(x, w)) per 4 bytes instead. The float part is per block per 8 rows, in
// the oracle's order per row lane (block i into accumulator i % 8 by fma(s, d * xd), then
// fma(xsum, m * xd) for Q4_1 / Q5_1; reduce_lanes' final order): bit-identical to the scalar
// path. Fewer than kQBlockBatchMinN tokens (decode) keep quant_gemm_rowwise's per-row dots.
// Thread-safety: called concurrently for disjoint (rows, tokens) tiles; scratch is thread_local.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "qblock_tiles.h"
#include "quant_gemm.h"
#include "tessera/common/quants.h"

namespace tessera::kernels::cpu {
namespace {

// The 32 nibbles of a block as bytes: low nibbles (values 0..15) then high nibbles (16..31).
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
}

// Byte j = 0x10 where bit j of the block's 32-bit qh is set (the fifth bit of value j).
inline __m256i fifth_bits(const uint8_t* qh4) {
  uint32_t qh;
  std::memcpy(&qh, qh4, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(qh)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// Per format: the block, the offset folded into the unsigned values, whether it has a min,
// how many maddubs results may be summed in int16 (0: signed values, the sign trick).
struct Q4_0 {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8, kGroup = 8;
  static constexpr bool kMin = false;
  static __m256i values(const Block& q) { return nibbles(q.qs); }
  static uint16_t m(const Block&) { return 0; }
};
struct Q4_1 {
  using Block = BlockQ4_1;
  static constexpr int kOffset = 0, kGroup = 8;
  static constexpr bool kMin = true;
  static __m256i values(const Block& q) { return nibbles(q.qs); }
  static uint16_t m(const Block& q) { return q.m; }
};
struct Q5_0 {
  using Block = BlockQ5_0;
  static constexpr int kOffset = 16, kGroup = 4;
  static constexpr bool kMin = false;
  static __m256i values(const Block& q) { return _mm256_or_si256(nibbles(q.qs), fifth_bits(q.qh)); }
  static uint16_t m(const Block&) { return 0; }
};
struct Q5_1 {
  using Block = BlockQ5_1;
  static constexpr int kOffset = 0, kGroup = 4;
  static constexpr bool kMin = true;
  static __m256i values(const Block& q) { return _mm256_or_si256(nibbles(q.qs), fifth_bits(q.qh)); }
  static uint16_t m(const Block& q) { return q.m; }
};
struct IQ4_NL {
  using Block = BlockIQ4_NL;
  static constexpr int kOffset = 0, kGroup = 0;
  static constexpr bool kMin = false;
  static __m256i values(const Block& q) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
    return _mm256_shuffle_epi8(table, nibbles(q.qs));
  }
  static uint16_t m(const Block&) { return 0; }
};

// r[i] = row i's 8 dwords -> r[k] lane i = dword k of row i.
inline void transpose8x8(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // u[4h + k]: rows 4h..4h+3, dwords k | k + 4
    const __m256i* a = t + 4 * h;
    u[4 * h + 0] = _mm256_unpacklo_epi64(a[0], a[2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(a[0], a[2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(a[1], a[3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(a[1], a[3]);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
    r[k + 4] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
  }
}

struct VecI {
  __m256i v;
};
struct VecF {
  __m256 v;
};
struct Packed8 {
  const __m256i* w;  // [nb][8]
  const __m256* d;   // [nb]: the rows' block scales
  const __m256* m;   // [nb]: the rows' block mins (Q4_1, Q5_1)
};

template <class F>
void pack8(const QuantGemmJob& g, int64_t r, int rows, int64_t nb, __m256i* w, __m256* d, __m256* m) {
  using Block = typename F::Block;
  const Block* row[8];  // missing rows (rows < 8) repeat row 0; their outputs are not stored
  for (int l = 0; l < 8; ++l) row[l] = reinterpret_cast<const Block*>(g.w + (r + (l < rows ? l : 0)) * g.w_row_bytes);
  alignas(16) uint16_t dh[8], mh[8];
  for (int64_t b = 0; b < nb; ++b) {
    __m256i v[8];
    for (int l = 0; l < 8; ++l) {
      v[l] = F::values(row[l][b]);
      dh[l] = row[l][b].d;
      mh[l] = F::m(row[l][b]);
    }
    transpose8x8(v);
    for (int k = 0; k < 8; ++k) w[b * 8 + k] = v[k];
    d[b] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
    if constexpr (F::kMin) m[b] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(mh)));
  }
}

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The exact integer sums of one block for the 8 packed rows with one token's block x.
template <class F>
inline __m256i block_sums(const __m256i* w, const int8_t* x) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (F::kGroup == 0) {
    __m256i s = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w[k]), _mm256_sign_epi8(bcast4(x + 4 * k), w[k]));
      s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
    }
    return s;
  } else {
    __m256i s = _mm256_setzero_si256();
    for (int k0 = 0; k0 < 8; k0 += F::kGroup) {
      __m256i p = _mm256_maddubs_epi16(w[k0], bcast4(x + 4 * k0));
      for (int k = k0 + 1; k < k0 + F::kGroup; ++k) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w[k], bcast4(x + 4 * k)));
      s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
    }
    return s;
  }
}

// Tokens [t, t + RN) x the 8 packed rows at r (rows of them real).
template <class F, int RN>
void packed_tokens(const QuantGemmJob& g, const Packed8& p, const int32_t* xsum, int64_t nb, int64_t r, int rows,
                   int64_t t, int64_t t0) {
  __m256 acc[RN][8];
  const int8_t* xq[RN];
  const float* xd[RN];
  const int32_t* xs[RN];
  for (int j = 0; j < RN; ++j) {
    for (int a = 0; a < 8; ++a) acc[j][a] = _mm256_setzero_ps();
    xq[j] = g.xq + (t + j) * g.cols;
    xd[j] = g.xd + (t + j) * nb;
    xs[j] = xsum + (t + j - t0) * nb;
  }
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
    for (int i = 0; i < 8; ++i) {  // unrolled: acc[j][i] stays put
      const int64_t b = b0 + i;
      if (b >= nb) break;
      for (int j = 0; j < RN; ++j) {
        __m256i s = block_sums<F>(p.w + b * 8, xq[j] + b * 32);
        if constexpr (F::kOffset != 0) s = _mm256_sub_epi32(s, _mm256_set1_epi32(F::kOffset * xs[j][b]));
        const __m256 xdv = _mm256_set1_ps(xd[j][b]);
        acc[j][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(p.d[b], xdv), acc[j][i]);
        if constexpr (F::kMin) {
          acc[j][i] = _mm256_fmadd_ps(_mm256_set1_ps(static_cast<float>(xs[j][b])), _mm256_mul_ps(p.m[b], xdv), acc[j][i]);
        }
      }
    }
  }
  for (int j = 0; j < RN; ++j) {
    const __m256* l = acc[j];
    const __m256 y = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(l[0], l[4]), _mm256_add_ps(l[2], l[6])),
                                   _mm256_add_ps(_mm256_add_ps(l[1], l[5]), _mm256_add_ps(l[3], l[7])));
    float* out = g.y + (t + j) * g.y_stride + r;
    if (rows == 8) {
      _mm256_storeu_ps(out, y);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, y);
      for (int l2 = 0; l2 < rows; ++l2) out[l2] = tmp[l2];
    }
  }
}

template <class F>
void gemm_packed(const QuantGemmJob& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t nb = g.cols / 32;
  thread_local std::vector<VecI> wv;  // wrapped: a vector of __m256i drops its alignment attribute
  thread_local std::vector<VecF> dv, mv;
  thread_local std::vector<int32_t> xsum;
  wv.resize(static_cast<size_t>(nb * 8));
  dv.resize(static_cast<size_t>(nb));
  mv.resize(static_cast<size_t>(nb));
  __m256i* w = &wv.data()->v;
  __m256* d = &dv.data()->v;
  __m256* m = &mv.data()->v;
  xsum.resize(static_cast<size_t>((t1 - t0) * nb));
  for (int64_t t = t0; t < t1; ++t) {  // each block's activation sum, once per task
    const int8_t* x = g.xq + t * g.cols;
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + b * 32));
      const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), _mm256_set1_epi16(1));
      __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
      h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
      xsum[static_cast<size_t>((t - t0) * nb + b)] = _mm_cvtsi128_si32(h);
    }
  }
  const Packed8 p{w, d, m};
  for (int64_t r = r0; r < r1; r += 8) {
    const int rows = static_cast<int>(std::min<int64_t>(8, r1 - r));
    pack8<F>(g, r, rows, nb, w, d, m);
    int64_t t = t0;
    for (; t + 2 <= t1; t += 2) packed_tokens<F, 2>(g, p, xsum.data(), nb, r, rows, t, t0);
    for (; t < t1; ++t) packed_tokens<F, 1>(g, p, xsum.data(), nb, r, rows, t, t0);
  }
}

template <class F>
void gemm_any(const QuantGemmJob& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  if (t1 - t0 >= kQBlockBatchMinN) {
    gemm_packed<F>(g, r0, r1, t0, t1);
  } else {
    quant_gemm_rowwise(g, r0, r1, t0, t1);
  }
}

}  // namespace

QuantTileFn qblock_tiles_avx2(DType t) {
  switch (t) {
    case DType::kQ4_0: return gemm_any<Q4_0>;
    case DType::kQ4_1: return gemm_any<Q4_1>;
    case DType::kQ5_0: return gemm_any<Q5_0>;
    case DType::kQ5_1: return gemm_any<Q5_1>;
    case DType::kIQ4_NL: return gemm_any<IQ4_NL>;
    default: return nullptr;
  }
}

}  // namespace tessera::kernels::cpu
