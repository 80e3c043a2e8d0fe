// swiglu on AVX-512 (tessera/kernels/activation.h); called only when isa_supported(Isa::kAvx512).
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cmath>
#include <cstdint>

#include "simd_math.h"

namespace tessera::kernels::cpu {

void swiglu_row_avx512(const float* gate, const float* up, float* out, int64_t cols) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= cols; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = exp512(_mm512_or_ps(g, _mm512_set1_ps(-0.0f)));  // exp(-|g|), in (0, 1]
    const __mmask16 neg = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 num = _mm512_mask_mul_ps(g, neg, g, e);  // g >= 0: g; g < 0: g * e
    const __m512 s = _mm512_div_ps(num, _mm512_add_ps(one, e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
  }
  for (; i < cols; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace tessera::kernels::cpu
