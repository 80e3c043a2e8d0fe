// AVX2 integer dot products of ggml weight blocks with quantized activations (the scalar
// oracle is quant_dot.cpp). Weights are unpacked to unsigned bytes (nibbles, 5- or 6-bit
// values) and multiplied with the signed int8 activations by maddubs (u8 x s8 -> s16 pairs,
// which cannot saturate at these ranges: 63 * 127 * 2 < 32767), then by the sub-block scales
// with madd (s16 x s16 -> s32). Each block's int32 sum goes to the shared finish_* of
// quant_dot.cpp, so the results equal the scalar path's bit for bit. Compiled with -mavx2 -mfma -mf16c; run only when
// isa_supported(Isa::kAvx2).
#include <immintrin.h>

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


// Integer sum of one Q4_K / Q5_K super-block with its Q8_K activations (without the mins).
template <bool kHigh, class Block>
int32_t q45k_block_sum(const Block& q, const BlockQ8_K& x) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  __m256i qh = _mm256_setzero_si256();
  if constexpr (kHigh) qh = load32(q.qh);
  __m256i sum = _mm256_setzero_si256();
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
    sum = _mm256_add_epi32(sum, scaled_dot(lo, load32(x.qs + 64 * p), _mm256_set1_epi16(sc0)));
    sum = _mm256_add_epi32(sum, scaled_dot(hi, load32(x.qs + 64 * p + 32), _mm256_set1_epi16(sc1)));
  }
  return hsum_epi32(sum);
}

int32_t q6k_block_sum(const BlockQ6_K& q, const BlockQ8_K& x) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i low2 = _mm256_set1_epi8(0x03);
  __m256i sum = _mm256_setzero_si256();
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
      sum = _mm256_add_epi32(sum, scaled_dot(v[k], load32(x.qs + 128 * half + 32 * k), scale));
    }
  }
  return hsum_epi32(sum);
}

int32_t q4_0_block_sum(const BlockQ4_0& q, const int8_t* x) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q.qs));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(raw, low4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low4);
  const __m256i qw = _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));  // signed -8 .. 7
  const __m256i xv = load32(x);
  // |w| * sign(x, w): u8 x s8 products with the sign moved onto the activations.
  const __m256i prod = _mm256_maddubs_epi16(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(xv, qw));
  return hsum_epi32(_mm256_madd_epi16(prod, _mm256_set1_epi16(1)));
}

}  // namespace

float dot_q4_k_q8_k_avx2(const uint8_t* w, const BlockQ8_K* xk, const int8_t*, const float*, int64_t nb) {
  const auto* b = reinterpret_cast<const BlockQ4_K*>(w);
  float acc = 0.0f;
  for (int64_t i0 = 0; i0 < nb; i0 += kFinishChunk) {
    const int64_t n = std::min<int64_t>(kFinishChunk, nb - i0);
    int32_t sums[kFinishChunk];
    for (int64_t i = 0; i < n; ++i) sums[i] = q45k_block_sum<false>(b[i0 + i], xk[i0 + i]);
    acc = finish_q4_k(w + i0 * sizeof(BlockQ4_K), xk + i0, sums, n, acc);
  }
  return acc;
}

float dot_q5_k_q8_k_avx2(const uint8_t* w, const BlockQ8_K* xk, const int8_t*, const float*, int64_t nb) {
  const auto* b = reinterpret_cast<const BlockQ5_K*>(w);
  float acc = 0.0f;
  for (int64_t i0 = 0; i0 < nb; i0 += kFinishChunk) {
    const int64_t n = std::min<int64_t>(kFinishChunk, nb - i0);
    int32_t sums[kFinishChunk];
    for (int64_t i = 0; i < n; ++i) sums[i] = q45k_block_sum<true>(b[i0 + i], xk[i0 + i]);
    acc = finish_q5_k(w + i0 * sizeof(BlockQ5_K), xk + i0, sums, n, acc);
  }
  return acc;
}

float dot_q6_k_q8_k_avx2(const uint8_t* w, const BlockQ8_K* xk, const int8_t*, const float*, int64_t nb) {
  const auto* b = reinterpret_cast<const BlockQ6_K*>(w);
  float acc = 0.0f;
  for (int64_t i0 = 0; i0 < nb; i0 += kFinishChunk) {
    const int64_t n = std::min<int64_t>(kFinishChunk, nb - i0);
    int32_t sums[kFinishChunk];
    for (int64_t i = 0; i < n; ++i) sums[i] = q6k_block_sum(b[i0 + i], xk[i0 + i]);
    acc = finish_q6_k(w + i0 * sizeof(BlockQ6_K), xk + i0, sums, n, acc);
  }
  return acc;
}

float dot_q4_0_q8_0_avx2(const uint8_t* w, const BlockQ8_K*, const int8_t* xq, const float* xd, int64_t nb) {
  const auto* b = reinterpret_cast<const BlockQ4_0*>(w);
  float acc = 0.0f;
  for (int64_t i0 = 0; i0 < nb; i0 += kFinishChunk) {
    const int64_t n = std::min<int64_t>(kFinishChunk, nb - i0);
    int32_t sums[kFinishChunk];
    for (int64_t i = 0; i < n; ++i) sums[i] = q4_0_block_sum(b[i0 + i], xq + 32 * (i0 + i));
    acc = finish_q4_0(w + i0 * sizeof(BlockQ4_0), xd + i0, sums, n, acc);
  }
  return acc;
}

}  // namespace tessera::kernels::cpu
