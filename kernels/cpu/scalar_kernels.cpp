// The portable scalar paths: the oracle every SIMD path is tested against.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "isa_table.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {
namespace {

template <float (*Load)(const uint8_t*, int64_t)>
void gemm_float(const GemmJob& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    const float* x = job.x + t * job.x_stride;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* w = job.w + r * job.w_row_bytes;
      float acc = 0.0f;
      for (int64_t c = 0; c < job.cols; ++c) acc += Load(w, c) * x[c];
      job.y[t * job.y_stride + r] = acc;
    }
  }
}

float load_f32(const uint8_t* w, int64_t c) {
  float v;
  std::memcpy(&v, w + 4 * c, 4);
  return v;
}
float load_f16(const uint8_t* w, int64_t c) {
  uint16_t h;
  std::memcpy(&h, w + 2 * c, 2);
  return fp16_to_f32(h);
}
float load_bf16(const uint8_t* w, int64_t c) {
  uint16_t h;
  std::memcpy(&h, w + 2 * c, 2);
  return bf16_to_f32(h);
}

void gemm_q8_0(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t nb = job.cols / 32;
  for (int64_t t = t0; t < t1; ++t) {
    const int8_t* xq = job.xq + t * job.cols;
    const float* xd = job.xd + t * nb;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* w = job.w + r * job.w_row_bytes;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        uint16_t h;
        std::memcpy(&h, w + b * 34, 2);
        int32_t isum = 0;
        for (int i = 0; i < 32; ++i) isum += static_cast<int8_t>(w[b * 34 + 2 + i]) * xq[b * 32 + i];
        acc += static_cast<float>(isum) * (fp16_to_f32(h) * xd[b]);
      }
      job.y[t * job.y_stride + r] = acc;
    }
  }
}

float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}
void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
void scale(float a, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

void f16_row(const uint8_t* src, float* dst, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = fp16_to_f32(h);
  }
}
float f16_one(uint16_t h) { return fp16_to_f32(h); }

#include "attention_impl.inc"

}  // namespace

void quantize_activations_q8(const float* x, int64_t cols, int8_t* q, float* d) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[b * 32 + i]));
    const float db = fp16_to_f32(f32_to_fp16(amax / 127.0f));  // ggml block_q8_0: fp16 scale
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;        // ggml quantize_row_q8_0
    d[b] = db;
    for (int i = 0; i < 32; ++i) {
      const int v = static_cast<int>(std::nearbyint(x[b * 32 + i] * id));
      q[b * 32 + i] = static_cast<int8_t>(v);
    }
  }
}

const IsaKernels& scalar_kernels() {
  static const IsaKernels k{
      .gemm_f32 = gemm_float<load_f32>,
      .gemm_f16 = gemm_float<load_f16>,
      .gemm_bf16 = gemm_float<load_bf16>,
      .gemm_q8_0 = gemm_q8_0,
      .quantize_q8 = quantize_activations_q8,
      .q8_scale_repeat = 1,
      .attend_group = attend_group,
      .dot = dot,
      .axpy = axpy,
      .scale = scale,
  };
  return k;
}

}  // namespace tessera::kernels::cpu
