// AVX-512 VNNI integer dots of ggml weight blocks with quantized activations (quant_gemm.h;
// the scalar oracle is quant_dot.cpp): the 32-byte products use vpdpbusd (u8 x s8 -> int32 in
// one instruction, AVX512-VNNI + VL) instead of maddubs + madd; the rest is the shared
// 256-bit code of quant_dot_simd.inc. Compiled with the AVX-512 flags of this folder; run only
// when isa_supported(Isa::kAvx512).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "quant_gemm.h"
#include "tessera/common/half.h"

namespace tessera::kernels::cpu {
namespace {

// sum of w (signed bytes) * x as 8 int32 partials: |w| * sign(x, w) through vpdpbusd.
inline __m256i dot_signed(__m256i w, __m256i x) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}
// sum of w (unsigned bytes <= 63) * x.
inline __m256i dot_unsigned(__m256i w, __m256i x) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x); }

}  // namespace
}  // namespace tessera::kernels::cpu

#define TESSERA_QD_FN(name) name##_avx512
#include "quant_dot_simd.inc"
