// swiglu (tessera/kernels/activation.h): the ISA dispatch; the scalar path is ops.h's silu_mul.
#include "tessera/kernels/activation.h"

#include "tessera/common/check.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {
namespace cpu {
// activation_avx512.cpp / activation_avx2.cpp: one row of cols floats each.
void swiglu_row_avx512(const float* gate, const float* up, float* out, int64_t cols);
void swiglu_row_avx2(const float* gate, const float* up, float* out, int64_t cols);
}  // namespace cpu

void swiglu(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
            int64_t out_stride, int64_t n, int64_t cols, Isa isa) {
  TS_CHECK(isa_supported(isa)) << "ISA path " << isa_name(isa) << " not supported by this CPU (or above TESSERA_ISA)";
  if (isa == Isa::kScalar) {
    silu_mul(gate, gate_stride, up, up_stride, out, out_stride, n, cols);
    return;
  }
  const auto row = isa == Isa::kAvx512 ? cpu::swiglu_row_avx512 : cpu::swiglu_row_avx2;
  for (int64_t t = 0; t < n; ++t) row(gate + t * gate_stride, up + t * up_stride, out + t * out_stride, cols);
}

}  // namespace tessera::kernels
