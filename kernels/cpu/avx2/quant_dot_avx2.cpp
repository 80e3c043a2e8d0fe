// AVX2 integer dots of ggml weight blocks with quantized activations (quant_gemm.h; the
// scalar oracle is quant_dot.cpp): maddubs (u8 x s8 -> s16 pairs) then madd to int32.
// Compiled with -mavx2 -mfma -mf16c; run only when isa_supported(Isa::kAvx2).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "quant_gemm.h"
#include "tessera/common/half.h"

namespace tessera::kernels::cpu {
namespace {

// sum of w (signed bytes) * x as 8 int32 partials: |w| * sign(x, w) through maddubs.
inline __m256i dot_signed(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}
// sum of w (unsigned bytes <= 63) * x.
inline __m256i dot_unsigned(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

}  // namespace
}  // namespace tessera::kernels::cpu

#define TESSERA_QD_FN(name) name##_avx2
#include "quant_dot_simd.inc"
