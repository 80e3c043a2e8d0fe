// exp_affine_sum on AVX-512 (tessera/kernels/softmax.h); called only when
// isa_supported(Isa::kAvx512). The exp polynomial is the attention softmax's (avx512_kernels.cpp).
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdint>

namespace tessera::kernels::cpu {
namespace {

// exp(x) on 16 lanes for -87 <= x <= 0 (Cephes polynomial, Cody-Waite reduction, scalef), relative error under 1e-6.
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, n);
}

inline float hsum(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

}  // namespace

double exp_affine_sum_avx512(const float* x, int64_t n, float scale, float shift, float* out) {
  const __m512 vs = _mm512_set1_ps(scale), vsh = _mm512_set1_ps(shift), lo = _mm512_set1_ps(-87.0f);
  double total = 0.0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    // The product rounded before the subtraction, as in the scalar path (the row's maximum then
    // gives an argument of exactly 0); the empty asm keeps GCC from contracting them into an fma.
    __m512 prod = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
    __asm__("" : "+v"(prod));
    const __m512 a = _mm512_sub_ps(prod, vsh);
    const __mmask16 live = _mm512_mask_cmp_ps_mask(m, a, lo, _CMP_GE_OQ);  // -inf, NaN, < -87: 0
    const __m512 e = _mm512_maskz_mov_ps(live, exp512(a));
    if (out != nullptr) _mm512_mask_storeu_ps(out + i, m, e);
    total += static_cast<double>(hsum(e));
  }
  return total;
}

}  // namespace tessera::kernels::cpu
