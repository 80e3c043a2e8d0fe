// AVX2 integer dot products of ggml weight blocks with quantized activations (the scalar
// oracle is quant_dot.cpp). Weights are unpacked to unsigned bytes (nibbles, 5- or 6-bit
// values) and multiplied with the signed int8 activations by maddubs (u8 x s8 -> s16 pairs,
// which cannot saturate at these ranges: 63 * 127 * 2 < 32767), then by the sub-block scales
// with madd (s16 x s16 -> s32). Each block's int32 sum goes to the shared finish_* of
// quant_dot.cpp, so the results equal the scalar path's bit for bit. Compiled with -mavx2 -mfma -mf16c; run only when
// isa_supported(Isa::kAvx2).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "quant_gemm.h"
#include "tessera/common/half.h"

namespace tessera::kernels::cpu {
namespace {

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// sum over 32 lanes of q (u8) * x (s8), times one scale, as 8 int32 lanes.
inline __m256i scaled_dot(__m256i q, __m256i x, __m256i scale16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), scale16);
}


// Integer sums of one Q4_K / Q5_K super-block with T rows of Q8_K activations (without the
// mins): the weights are unpacked once; out[j] is exactly the single-row sum of row j.
template <bool kHigh, int T, class Block>
void q45k_block_sums(const Block& q, const BlockQ8_K* const* x, int32_t* out) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  __m256i qh = _mm256_setzero_si256();
  if constexpr (kHigh) qh = load32(q.qh);
  __m256i sum[T];
  for (int j = 0; j < T; ++j) sum[j] = _mm256_setzero_si256();
  for (int p = 0; p < 4; ++p) {
    uint8_t sc0, m0, sc1, m1;
    q4k_scale_min(2 * p, q.scales, &sc0, &m0);
    q4k_scale_min(2 * p + 1, q.scales, &sc1, &m1);
    const __m256i raw = load32(q.qs + 32 * p);
    __m256i lo = _mm256_and_si256(raw, low4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
    if constexpr (kHigh) {
      // Bit j of every qh byte is the fifth bit of sub-block j (16-bit shifts, then a byte mask).
      const __m128i s0 = _mm_cvtsi32_si128(2 * p), s1 = _mm_cvtsi32_si128(2 * p + 1);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, s0), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, s1), one), 4));
    }
    const __m256i sc0v = _mm256_set1_epi16(sc0), sc1v = _mm256_set1_epi16(sc1);
    for (int j = 0; j < T; ++j) {
      sum[j] = _mm256_add_epi32(sum[j], scaled_dot(lo, load32(x[j]->qs + 64 * p), sc0v));
      sum[j] = _mm256_add_epi32(sum[j], scaled_dot(hi, load32(x[j]->qs + 64 * p + 32), sc1v));
    }
  }
  for (int j = 0; j < T; ++j) out[j] = hsum_epi32(sum[j]);
}

template <int T>
void q6k_block_sums(const BlockQ6_K& q, const BlockQ8_K* const* x, int32_t* out) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i low2 = _mm256_set1_epi8(0x03);
  __m256i sum[T];
  for (int j = 0; j < T; ++j) sum[j] = _mm256_setzero_si256();
  for (int half = 0; half < 2; ++half) {
    const __m256i ql0 = load32(q.ql + 64 * half), ql1 = load32(q.ql + 64 * half + 32);
    const __m256i qh = load32(q.qh + 32 * half);
    const __m256i v[4] = {
        _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_slli_epi16(_mm256_and_si256(qh, low2), 4)),
        _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), low2), 4)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), low2), 4)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), low2), 4)),
    };
    for (int k = 0; k < 4; ++k) {
      const int g = 8 * half + 2 * k;  // scale groups of the 32 values: g (first 16), g + 1
      const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(q.scales[g + 1]), _mm_set1_epi16(q.scales[g]));
      for (int j = 0; j < T; ++j) {
        sum[j] = _mm256_add_epi32(sum[j], scaled_dot(v[k], load32(x[j]->qs + 128 * half + 32 * k), scale));
      }
    }
  }
  for (int j = 0; j < T; ++j) out[j] = hsum_epi32(sum[j]);
}

// T rows: per chunk of super-blocks, the integer sums of every row, then each row's finish.
template <int T, class Block, class Sums>
void kquant_dot(const uint8_t* w, const BlockQ8_K* const* xk, int64_t nb, float* out,
                float (*finish)(const uint8_t*, const BlockQ8_K*, const int32_t*, int64_t, float), Sums sums_of) {
  const auto* b = reinterpret_cast<const Block*>(w);
  float acc[T];
  for (int j = 0; j < T; ++j) acc[j] = 0.0f;
  for (int64_t i0 = 0; i0 < nb; i0 += kFinishChunk) {
    const int64_t n = std::min<int64_t>(kFinishChunk, nb - i0);
    int32_t sums[T][kFinishChunk];
    for (int64_t i = 0; i < n; ++i) {
      const BlockQ8_K* x[T];
      int32_t s[T];
      for (int j = 0; j < T; ++j) x[j] = xk[j] + i0 + i;
      sums_of(b[i0 + i], x, s);
      for (int j = 0; j < T; ++j) sums[j][i] = s[j];
    }
    for (int j = 0; j < T; ++j) acc[j] = finish(w + i0 * sizeof(Block), xk[j] + i0, sums[j], n, acc[j]);
  }
  for (int j = 0; j < T; ++j) out[j] = acc[j];
}

// ---- the 32-value formats: 8 blocks per step (lane order of quant_gemm.h) ----------------

// Block k's 8 int32 partial sums (p[k]) -> one int32 per block, block k in lane k.
inline __m256i reduce8(const __m256i p[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

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

// sum of w (signed bytes) * x as 8 int32 partials: |w| * sign(x, w) through maddubs.
inline __m256i dot_signed(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}
// sum of w (unsigned bytes <= 31) * x.
inline __m256i dot_unsigned(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

// T activation rows at once (the batched case): each block is unpacked once and dotted with
// every row; each row's arithmetic is exactly the single-row path's, so results do not
// depend on T. Unpack(block) -> the 32 weight values as bytes (signed if kSigned, else <= 31).
template <class Block, bool kMin, bool kSigned, int T, class Unpack>
void dot32(const uint8_t* w, const int8_t* const* xq, const float* const* xd, int64_t nb, float* out, Unpack unpack) {
  const auto* b = reinterpret_cast<const Block*>(w);
  __m256 lanes[T];
  for (int j = 0; j < T; ++j) lanes[j] = _mm256_setzero_ps();
  for (int64_t i0 = 0; i0 < nb; i0 += 8) {
    const int n = static_cast<int>(std::min<int64_t>(8, nb - i0));
    __m256i ps[T][8], px[T][8];
    alignas(16) uint16_t d16[8] = {0, 0, 0, 0, 0, 0, 0, 0}, m16[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int k = 0; k < 8; ++k) {
      if (k < n) {
        const Block& q = b[i0 + k];
        const __m256i wv = unpack(q);
        d16[k] = q.d;
        if constexpr (kMin) m16[k] = q.m;
        for (int j = 0; j < T; ++j) {
          const __m256i x = load32(xq[j] + 32 * (i0 + k));
          ps[j][k] = kSigned ? dot_signed(wv, x) : dot_unsigned(wv, x);
          if constexpr (kMin) px[j][k] = dot_unsigned(_mm256_set1_epi8(1), x);
        }
      } else {
        for (int j = 0; j < T; ++j) ps[j][k] = px[j][k] = _mm256_setzero_si256();
      }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d16)));
    const __m256 mw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(m16)));
    for (int j = 0; j < T; ++j) {
      alignas(32) float xdv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int k = 0; k < n; ++k) xdv[k] = xd[j][i0 + k];
      const __m256 x_scale = _mm256_load_ps(xdv);
      lanes[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(ps[j])), _mm256_mul_ps(dw, x_scale), lanes[j]);
      if constexpr (kMin) {
        lanes[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(px[j])), _mm256_mul_ps(mw, x_scale), lanes[j]);
      }
    }
  }
  for (int j = 0; j < T; ++j) {
    alignas(32) float l[8];
    _mm256_store_ps(l, lanes[j]);
    out[j] = reduce_lanes(l);
  }
}

inline __m256i unpack_q4_0(const BlockQ4_0& q) { return _mm256_sub_epi8(nibbles(q.qs), _mm256_set1_epi8(8)); }
inline __m256i unpack_q4_1(const BlockQ4_1& q) { return nibbles(q.qs); }
inline __m256i unpack_q5_0(const BlockQ5_0& q) {
  return _mm256_sub_epi8(_mm256_or_si256(nibbles(q.qs), fifth_bits(q.qh)), _mm256_set1_epi8(16));
}
inline __m256i unpack_q5_1(const BlockQ5_1& q) { return _mm256_or_si256(nibbles(q.qs), fifth_bits(q.qh)); }
inline __m256i unpack_iq4_nl(const BlockIQ4_NL& q) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
  return _mm256_shuffle_epi8(table, nibbles(q.qs));
}

}  // namespace

#define TESSERA_KDOT_AVX2(name, Block, sums_fn)                                                                   \
  float dot_##name##_q8_k_avx2(const uint8_t* w, const BlockQ8_K* xk, const int8_t*, const float*, int64_t nb) {    \
    float out;                                                                                                    \
    kquant_dot<1, Block>(w, &xk, nb, &out, finish_##name, [](const Block& q, const BlockQ8_K* const* x, int32_t* s) { \
      sums_fn<1>(q, x, s);                                                                                        \
    });                                                                                                           \
    return out;                                                                                                   \
  }                                                                                                               \
  void dot4_##name##_q8_k_avx2(const uint8_t* w, const BlockQ8_K* const* xk, const int8_t* const*, const float* const*, \
                               int64_t nb, float* out) {                                                          \
    kquant_dot<4, Block>(w, xk, nb, out, finish_##name, [](const Block& q, const BlockQ8_K* const* x, int32_t* s) {  \
      sums_fn<4>(q, x, s);                                                                                        \
    });                                                                                                           \
  }

template <int T>
void q4k_sums(const BlockQ4_K& q, const BlockQ8_K* const* x, int32_t* s) { q45k_block_sums<false, T>(q, x, s); }
template <int T>
void q5k_sums(const BlockQ5_K& q, const BlockQ8_K* const* x, int32_t* s) { q45k_block_sums<true, T>(q, x, s); }
template <int T>
void q6k_sums(const BlockQ6_K& q, const BlockQ8_K* const* x, int32_t* s) { q6k_block_sums<T>(q, x, s); }

TESSERA_KDOT_AVX2(q4_k, BlockQ4_K, q4k_sums)
TESSERA_KDOT_AVX2(q5_k, BlockQ5_K, q5k_sums)
TESSERA_KDOT_AVX2(q6_k, BlockQ6_K, q6k_sums)
#undef TESSERA_KDOT_AVX2

#define TESSERA_DOT32_AVX2(name, Block, kMin, kSigned)                                                          \
  float dot_##name##_q8_0_avx2(const uint8_t* w, const BlockQ8_K*, const int8_t* xq, const float* xd, int64_t nb) { \
    float out;                                                                                                    \
    dot32<Block, kMin, kSigned, 1>(w, &xq, &xd, nb, &out, unpack_##name);                                         \
    return out;                                                                                                   \
  }                                                                                                               \
  void dot4_##name##_q8_0_avx2(const uint8_t* w, const BlockQ8_K* const*, const int8_t* const* xq,                 \
                               const float* const* xd, int64_t nb, float* out) {                                  \
    dot32<Block, kMin, kSigned, 4>(w, xq, xd, nb, out, unpack_##name);                                            \
  }

TESSERA_DOT32_AVX2(q4_0, BlockQ4_0, false, true)
TESSERA_DOT32_AVX2(q4_1, BlockQ4_1, true, false)
TESSERA_DOT32_AVX2(q5_0, BlockQ5_0, false, true)
TESSERA_DOT32_AVX2(q5_1, BlockQ5_1, true, false)
TESSERA_DOT32_AVX2(iq4_nl, BlockIQ4_NL, false, true)
#undef TESSERA_DOT32_AVX2

}  // namespace tessera::kernels::cpu
