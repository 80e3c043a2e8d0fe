// Small element-wise and row-wise CPU kernels of a Llama-family forward pass. Portable C++
// (one path; the compiler vectorizes them at the baseline ISA). They cost O(tokens * dim),
// next to O(tokens * dim^2) for the matmuls, so they carry no hand-written SIMD paths.
// All pointers are raw f32 arrays; strides are in floats. Not thread-safe on overlapping output.
#pragma once

#include <cstdint>

#include "tessera/common/dtype.h"
#include "tessera/common/half.h"

namespace tessera::kernels {

// Half-precision conversions (IEEE binary16 and bfloat16): the one implementation, common/half.h.
using tessera::bf16_to_f32;
using tessera::f32_to_bf16;
using tessera::f32_to_fp16;
using tessera::fp16_to_f32;

// out[0, cols) = dequantized row `row` ([cols] elements of dtype t, dtype_row_bytes(t, cols)
// bytes). Supports every DType (ggml's dequantize_row_*, bit for bit; see quants.h).
void dequantize_row(DType t, const void* row, float* out, int64_t cols);
// Quantizes a row to ggml Q8_0 blocks (cols % 32 == 0): out gets dtype_row_bytes(kQ8_0, cols).
void quantize_row_q8_0(const float* x, void* out, int64_t cols);

// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight[:]   for t in [0, n).
// x: [n, dim] stride x_stride; out: [n, dim] stride out_stride (may equal x); weight: [dim].
void rmsnorm(const float* x, int64_t x_stride, const float* weight, float* out, int64_t out_stride,
             int64_t n, int64_t dim, float eps);

// RoPE tables: cos_sin[t * head_dim + 2 * i] = cos(angle), cos_sin[t * head_dim + 2 * i + 1] =
// sin(angle), angle = freq_scale * pos[t] * theta^(-2i/head_dim) / freq_factors[i], i in
// [0, head_dim / 2) (ggml_rope_ext without YaRN: freq_factors are Llama 3's rope_freqs, nullptr
// for all 1; freq_scale is linear scaling). [n, head_dim] floats.
void rope_table(const int32_t* positions, int64_t n, int64_t head_dim, float theta, float* cos_sin,
                const float* freq_factors = nullptr, float freq_scale = 1.0f);

// Rotates every head of x in place: x row t is [n_heads, head_dim] at x + t * x_stride.
// interleaved: pairs (2i, 2i+1) rotate by angle i; otherwise (halves) pairs (i, i + head_dim/2).
void rope(float* x, int64_t x_stride, int64_t n, int64_t n_heads, int64_t head_dim, const float* cos_sin,
          bool interleaved);

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i], for n rows of `cols`.
void silu_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
              int64_t out_stride, int64_t n, int64_t cols);

// out[i] = gelu(gate[i]) * up[i] with the tanh approximation
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Gemma's GeGLU), for n rows of `cols`,
// rounded as llama.cpp's CPU backend does (x and gelu(x) through fp16; x above 10 passes, below
// -10 gives 0): this halves the measured Gemma 2 log-probability difference to llama.cpp.
void gelu_tanh_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
                   int64_t out_stride, int64_t n, int64_t cols);

// In place: x[i] = cap * tanh(x[i] / cap) (Gemma 2's logit soft-capping).
void softcap(float* x, int64_t n, float cap);

// In place: x[i] *= s
void scale_inplace(float* x, int64_t n, float s);

// In place: x = softmax(x) over n elements (max-subtracted).
void softmax(float* x, int64_t n);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

}  // namespace tessera::kernels
