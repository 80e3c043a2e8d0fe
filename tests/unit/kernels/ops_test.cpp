// Element-wise kernels against double-precision formulas written out in the test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernel_test_util.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {
namespace {

using testing::random_floats;

TEST(Ops, HalfConversionsRoundTripAndRound) {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333333f}) {
    const float back = fp16_to_f32(f32_to_fp16(v));
    EXPECT_NEAR(back, v, std::fabs(v) * 1e-3 + 1e-7) << v;
  }
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_fp16(1e6f), 0x7c00);              // overflow -> inf
  EXPECT_EQ(fp16_to_f32(0x0001), 5.9604645e-08f);    // smallest subnormal
  EXPECT_EQ(f32_to_fp16(1.0f + 1.0f / 2048.0f), 0x3c00);  // tie rounds to even
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
  // Every finite half converts to f32 and back unchanged.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(f32_to_fp16(fp16_to_f32(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(Ops, Q8_0RoundTripWithinHalfAStep) {
  const int64_t cols = 96;
  const auto x = random_floats(cols, 3, -4.0f, 4.0f);
  std::vector<uint8_t> q(dtype_row_bytes(DType::kQ8_0, cols));
  quantize_row_q8_0(x.data(), q.data(), cols);
  std::vector<float> back(cols);
  dequantize_row(DType::kQ8_0, q.data(), back.data(), cols);
  for (int64_t b = 0; b < cols / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * 32 + i)]));
    const float step = amax / 127.0f;
    for (int i = 0; i < 32; ++i) {
      EXPECT_LE(std::fabs(back[static_cast<size_t>(b * 32 + i)] - x[static_cast<size_t>(b * 32 + i)]), step * 0.51f + 1e-3f);
    }
  }
}

TEST(Ops, RmsNormMatchesFormula) {
  for (int64_t dim : {1, 7, 64, 577}) {
    const int64_t n = 3;
    const auto x = random_floats(static_cast<size_t>(n * dim), 1);
    const auto w = random_floats(static_cast<size_t>(dim), 2);
    std::vector<float> out(static_cast<size_t>(n * dim));
    rmsnorm(x.data(), dim, w.data(), out.data(), dim, n, dim, 1e-5f);
    for (int64_t t = 0; t < n; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[static_cast<size_t>(t * dim + i)]) * x[static_cast<size_t>(t * dim + i)];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + 1e-5);
      for (int64_t i = 0; i < dim; ++i) {
        const double ref = x[static_cast<size_t>(t * dim + i)] * inv * w[static_cast<size_t>(i)];
        EXPECT_NEAR(out[static_cast<size_t>(t * dim + i)], ref, 1e-5 * (1 + std::fabs(ref))) << dim;
      }
    }
  }
}

TEST(Ops, RopeBothLayoutsMatchRotation) {
  const int64_t n_heads = 3, hd = 8, n = 4;
  const int32_t pos[n] = {0, 1, 17, 300};
  std::vector<float> cs(static_cast<size_t>(n * hd));
  rope_table(pos, n, hd, 10000.0f, cs.data());
  for (bool interleaved : {true, false}) {
    auto x = random_floats(static_cast<size_t>(n * n_heads * hd), 9);
    const auto orig = x;
    rope(x.data(), n_heads * hd, n, n_heads, hd, cs.data(), interleaved);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < n_heads; ++h) {
        for (int64_t i = 0; i < hd / 2; ++i) {
          const double ang = pos[t] * std::pow(10000.0, -2.0 * static_cast<double>(i) / hd);
          const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + hd / 2;
          const size_t base = static_cast<size_t>(t * n_heads * hd + h * hd);
          const double v0 = orig[base + a], v1 = orig[base + b];
          EXPECT_NEAR(x[base + a], v0 * std::cos(ang) - v1 * std::sin(ang), 1e-5);
          EXPECT_NEAR(x[base + b], v0 * std::sin(ang) + v1 * std::cos(ang), 1e-5);
        }
      }
    }
  }
}

TEST(Ops, SiluMulAndSoftmax) {
  const auto g = random_floats(37, 4, -6.0f, 6.0f);
  const auto u = random_floats(37, 5);
  std::vector<float> o(37);
  silu_mul(g.data(), 37, u.data(), 37, o.data(), 37, 1, 37);
  for (size_t i = 0; i < 37; ++i) EXPECT_NEAR(o[i], g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i], 1e-6);

  std::vector<float> s = {1000.0f, 999.0f, -5.0f, 1000.0f};  // large values: max-subtracted
  softmax(s.data(), 4);
  const double z = 2.0 + std::exp(-1.0) + std::exp(-1005.0);
  EXPECT_NEAR(s[0], 1.0 / z, 1e-7);
  EXPECT_NEAR(s[1], std::exp(-1.0) / z, 1e-7);
  EXPECT_NEAR(s[2], 0.0, 1e-7);
  EXPECT_NEAR(s[0] + s[1] + s[2] + s[3], 1.0, 1e-6);
}

}  // namespace
}  // namespace tessera::kernels
