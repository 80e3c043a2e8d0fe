// argmax's two passes on AVX2 (tessera/kernels/softmax.h); called only when isa_supported(Isa::kAvx2).
#include <immintrin.h>

#include <cstdint>

namespace tessera::kernels::cpu {

float row_max_avx2(const float* x, int64_t n, bool* has_nan) {
  __m256 m = _mm256_set1_ps(-__builtin_inff()), unord = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    unord = _mm256_or_ps(unord, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    m = _mm256_max_ps(m, v);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float best = lanes[0];
  for (int j = 1; j < 8; ++j) best = lanes[j] > best ? lanes[j] : best;
  bool nan = _mm256_movemask_ps(unord) != 0;
  for (; i < n; ++i) {
    nan = nan || x[i] != x[i];
    best = x[i] > best ? x[i] : best;
  }
  *has_nan = nan;
  return best;
}

int64_t first_equal_avx2(const float* x, int64_t n, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vv, _CMP_EQ_OQ));
    if (eq != 0) return i + __builtin_ctz(static_cast<unsigned>(eq));
  }
  for (; i < n; ++i) {
    if (x[i] == v) return i;
  }
  return 0;  // unreachable for v taken from the row
}

}  // namespace tessera::kernels::cpu
