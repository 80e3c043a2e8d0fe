#include "tessera/kernels/ops.h"

#include <cmath>
#include <cstring>

#include "tessera/common/check.h"
#include "tessera/common/quants.h"

namespace tessera::kernels {

void dequantize_row(DType t, const void* row, float* out, int64_t cols) {
  const auto* p = static_cast<const uint8_t*>(row);
  switch (t) {
    case DType::kF32:
      std::memcpy(out, p, static_cast<size_t>(cols) * 4);
      return;
    case DType::kF16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h;
        std::memcpy(&h, p + 2 * c, 2);
        out[c] = fp16_to_f32(h);
      }
      return;
    case DType::kBF16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h;
        std::memcpy(&h, p + 2 * c, 2);
        out[c] = bf16_to_f32(h);
      }
      return;
    case DType::kQ8_0:
      TS_CHECK_EQ(cols % 32, 0);
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = p + b * 34;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const float d = fp16_to_f32(h);
        for (int i = 0; i < 32; ++i) out[b * 32 + i] = static_cast<float>(static_cast<int8_t>(blk[2 + i])) * d;
      }
      return;
    case DType::kQ4_0:
      TS_CHECK_EQ(cols % 32, 0);
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = p + b * 18;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const float d = fp16_to_f32(h);
        for (int i = 0; i < 16; ++i) {
          out[b * 32 + i] = static_cast<float>((blk[2 + i] & 0x0f) - 8) * d;
          out[b * 32 + i + 16] = static_cast<float>((blk[2 + i] >> 4) - 8) * d;
        }
      }
      return;
    case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ2_K: case DType::kQ3_K:
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K: case DType::kIQ4_NL: case DType::kIQ4_XS:
      tessera::dequantize(t, row, out, cols);
      return;
  }
  TS_CHECK(false) << "dequantize_row: unknown dtype";
}

void quantize_row_q8_0(const float* x, void* out, int64_t cols) {
  TS_CHECK_EQ(cols % 32, 0);
  auto* p = static_cast<uint8_t*>(out);
  for (int64_t b = 0; b < cols / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = f32_to_fp16(d);
    std::memcpy(p + b * 34, &h, 2);
    for (int i = 0; i < 32; ++i) {
      p[b * 34 + 2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(x[b * 32 + i] * id)));
    }
  }
}

void rmsnorm(const float* x, int64_t x_stride, const float* weight, float* out, int64_t out_stride, int64_t n,
             int64_t dim, float eps) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * x_stride;
    float* o = out + t * out_stride;
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) o[i] = xr[i] * inv * weight[i];
  }
}

void rope_table(const int32_t* positions, int64_t n, int64_t head_dim, float theta, float* cos_sin,
                const float* freq_factors, float freq_scale) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      double freq = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      if (freq_factors != nullptr) freq /= static_cast<double>(freq_factors[i]);
      const double angle = static_cast<double>(freq_scale) * static_cast<double>(positions[t]) * freq;
      cos_sin[t * head_dim + 2 * i] = static_cast<float>(std::cos(angle));
      cos_sin[t * head_dim + 2 * i + 1] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope(float* x, int64_t x_stride, int64_t n, int64_t n_heads, int64_t head_dim, const float* cos_sin,
          bool interleaved) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < n; ++t) {
    const float* cs = cos_sin + t * head_dim;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * x_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = interleaved ? 2 * i : i;
        const int64_t b = interleaved ? 2 * i + 1 : i + half;
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float v0 = v[a], v1 = v[b];
        v[a] = v0 * c - v1 * s;
        v[b] = v0 * s + v1 * c;
      }
    }
  }
}

void silu_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
              int64_t out_stride, int64_t n, int64_t cols) {
  for (int64_t t = 0; t < n; ++t) {
    const float* g = gate + t * gate_stride;
    const float* u = up + t * up_stride;
    float* o = out + t * out_stride;
    for (int64_t i = 0; i < cols; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void gelu_tanh_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
                   int64_t out_stride, int64_t n, int64_t cols) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  for (int64_t t = 0; t < n; ++t) {
    const float* g = gate + t * gate_stride;
    const float* u = up + t * up_stride;
    float* o = out + t * out_stride;
    for (int64_t i = 0; i < cols; ++i) {
      // As ggml's ggml_vec_gelu_f32 (GGML_GELU_FP16): the input rounded to fp16, gelu of it
      // rounded to fp16 (its lookup table); identity above 10, zero below -10.
      const float x = g[i];
      float y;
      if (x <= -10.0f) {
        y = 0.0f;
      } else if (x >= 10.0f) {
        y = x;
      } else {
        const float h = fp16_to_f32(f32_to_fp16(x));
        y = fp16_to_f32(f32_to_fp16(0.5f * h * (1.0f + std::tanh(kSqrt2OverPi * h * (1.0f + 0.044715f * h * h)))));
      }
      o[i] = y * u[i];
    }
  }
}

void softcap(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void scale_inplace(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::fmax(mx, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace tessera::kernels
