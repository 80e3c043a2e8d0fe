// swiglu on AVX2 + FMA (tessera/kernels/activation.h); called only when isa_supported(Isa::kAvx2).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace tessera::kernels::cpu {
namespace {

// exp(x) on 8 lanes for -87 <= x <= 0 (smaller x, and NaN, are clamped to -87): the AVX-512
// path's polynomial (avx512/simd_math.h: Cephes, Cody-Waite reduction), 2^n from the exponent bits.
inline __m256 exp256(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // n in [-126, 0]: 2^n = (n + 127) << 23 as float bits.
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

}  // namespace

void swiglu_row_avx2(const float* gate, const float* up, float* out, int64_t cols) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= cols; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp256(_mm256_or_ps(g, _mm256_set1_ps(-0.0f)));  // exp(-|g|), in (0, 1]
    const __m256 neg = _mm256_cmp_ps(g, zero, _CMP_LT_OQ);
    const __m256 num = _mm256_blendv_ps(g, _mm256_mul_ps(g, e), neg);  // g >= 0: g; g < 0: g * e
    const __m256 s = _mm256_div_ps(num, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < cols; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace tessera::kernels::cpu
