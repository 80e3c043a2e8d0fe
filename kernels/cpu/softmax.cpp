// exp_affine_sum and argmax (tessera/kernels/softmax.h): the portable paths and the ISA dispatch.
#include "tessera/kernels/softmax.h"

#include <cmath>

#include "tessera/common/check.h"

namespace tessera::kernels {
namespace cpu {
double exp_affine_sum_avx512(const float* x, int64_t n, float scale, float shift, float* out);  // avx512/softmax_avx512.cpp
// The row's largest value and whether it has a NaN (the caller then takes the scalar walk).
float row_max_avx512(const float* x, int64_t n, bool* has_nan);        // avx512/softmax_avx512.cpp
int64_t first_equal_avx512(const float* x, int64_t n, float v);         // avx512/softmax_avx512.cpp
float row_max_avx2(const float* x, int64_t n, bool* has_nan);          // avx2/argmax_avx2.cpp
int64_t first_equal_avx2(const float* x, int64_t n, float v);           // avx2/argmax_avx2.cpp
}  // namespace cpu

namespace {

double exp_affine_sum_scalar(const float* x, int64_t n, float scale, float shift, float* out) {
  double total = 0.0;
  for (int64_t i0 = 0; i0 < n; i0 += 16) {  // float partial sums of 16 terms, as the AVX-512 path
    float part = 0.0f;
    const int64_t end = i0 + 16 < n ? i0 + 16 : n;
    for (int64_t i = i0; i < end; ++i) {
      const float a = x[i] * scale - shift;
      const float e = a >= -87.0f ? std::exp(a) : 0.0f;
      if (out != nullptr) out[i] = e;
      part += e;
    }
    total += static_cast<double>(part);
  }
  return total;
}

int64_t argmax_scalar(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace

double exp_affine_sum(const float* x, int64_t n, float scale, float shift, float* out, Isa isa) {
  TS_CHECK(isa_supported(isa)) << "ISA path " << isa_name(isa) << " not supported by this CPU (or above TESSERA_ISA)";
  if (isa == Isa::kAvx512) return cpu::exp_affine_sum_avx512(x, n, scale, shift, out);
  return exp_affine_sum_scalar(x, n, scale, shift, out);
}

int64_t argmax(const float* x, int64_t n, Isa isa) {
  TS_CHECK(isa_supported(isa)) << "ISA path " << isa_name(isa) << " not supported by this CPU (or above TESSERA_ISA)";
  TS_CHECK(n >= 1) << "argmax of an empty row";
  // Two passes over the row (the largest value, then its first place): for a row of logits
  // (L1/L2-resident) a few microseconds, against ~5 cycles per element for the walk's chain.
  bool has_nan = false;
  if (isa == Isa::kAvx512) {
    const float m = cpu::row_max_avx512(x, n, &has_nan);
    if (!has_nan) return cpu::first_equal_avx512(x, n, m);
  } else if (isa == Isa::kAvx2) {
    const float m = cpu::row_max_avx2(x, n, &has_nan);
    if (!has_nan) return cpu::first_equal_avx2(x, n, m);
  }
  return argmax_scalar(x, n);
}

}  // namespace tessera::kernels
