// SwiGLU's element-wise product on the SIMD paths: out = silu(gate) * up, where
// silu(g) = g / (1 + exp(-g)), for n rows of `cols` floats (strides in floats; out may equal gate
// or up, row for row). The scalar path is ops.h's silu_mul (std::exp), the oracle.
//
// Isa::kAvx512 (16 lanes) and Isa::kAvx2 (8 lanes) evaluate exp(-|g|) with the Cephes polynomial
// of the attention softmax (simd_math.h; relative error under 1e-6, arguments below -87 clamped
// there), then sigmoid(g) = 1 / (1 + e) for g >= 0 and e / (1 + e) below; the result agrees
// with silu_mul to a few float ulps (the test bounds it at 2e-6 relative). NaN in gate or up gives
// NaN. Column tails shorter than a vector take the scalar formula. Pure function; thread-safe.
#pragma once

#include <cstdint>

#include "tessera/kernels/isa.h"

namespace tessera::kernels {

// isa must be supported (isa_supported(isa)); a fatal check names it otherwise.
void swiglu(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
            int64_t out_stride, int64_t n, int64_t cols, Isa isa);

}  // namespace tessera::kernels
