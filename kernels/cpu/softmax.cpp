// exp_affine_sum (tessera/kernels/softmax.h): the portable path and the ISA dispatch.
#include "tessera/kernels/softmax.h"

#include <cmath>

#include "tessera/common/check.h"

namespace tessera::kernels {
namespace cpu {
double exp_affine_sum_avx512(const float* x, int64_t n, float scale, float shift, float* out);  // avx512/softmax_avx512.cpp
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

}  // namespace

double exp_affine_sum(const float* x, int64_t n, float scale, float shift, float* out, Isa isa) {
  TS_CHECK(isa_supported(isa)) << "ISA path " << isa_name(isa) << " not supported by this CPU (or above TESSERA_ISA)";
  if (isa == Isa::kAvx512) return cpu::exp_affine_sum_avx512(x, n, scale, shift, out);
  return exp_affine_sum_scalar(x, n, scale, shift, out);
}

}  // namespace tessera::kernels
