// exp_affine_sum and argmax's two passes on AVX-512 (tessera/kernels/softmax.h); called only when
// isa_supported(Isa::kAvx512). The exp polynomial is the attention softmax's (simd_math.h).
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdint>

#include "simd_math.h"

namespace tessera::kernels::cpu {

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

float row_max_avx512(const float* x, int64_t n, bool* has_nan) {
  __m512 m = _mm512_set1_ps(-__builtin_inff());
  __mmask16 nan = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    nan |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
    m = _mm512_mask_max_ps(m, k, m, v);
  }
  *has_nan = nan != 0;
  return _mm512_reduce_max_ps(m);
}

int64_t first_equal_avx512(const float* x, int64_t n, float v) {
  const __m512 vv = _mm512_set1_ps(v);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __mmask16 eq = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, x + i), vv, _CMP_EQ_OQ);
    if (eq != 0) return i + __builtin_ctz(eq);
  }
  return 0;  // unreachable for v taken from the row
}

}  // namespace tessera::kernels::cpu
