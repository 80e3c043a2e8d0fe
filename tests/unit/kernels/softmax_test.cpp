// exp_affine_sum (tessera/kernels/softmax.h): every ISA path against double-precision exp (relative
// error under 1e-6 per term and for the sum) over
// rows of awkward lengths (tails of 1..15 lanes), terms at -inf or below -87 exactly 0, the
// row's maximum exactly 1, the same bits on every call.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "tessera/kernels/softmax.h"

namespace tessera::kernels {
namespace {

TEST(ExpAffineSum, EveryPathIsDoubleExpWithin1e6Relative) {
  std::vector<Isa> isas = testing::simd_isas();
  isas.push_back(Isa::kScalar);
  const float scale = 1.0f / 0.7f;
  for (int64_t n : {1, 15, 16, 17, 511, 512, 1000}) {
    std::vector<float> x = testing::random_floats(static_cast<size_t>(n), static_cast<uint64_t>(n), -40.0f, 4.0f);
    if (n > 1) x[0] = -std::numeric_limits<float>::infinity();
    if (n > 3) x[static_cast<size_t>(n) - 2] = -1000.0f;  // argument far below -87
    float x_max = -std::numeric_limits<float>::infinity();
    for (float v : x) x_max = std::max(x_max, v * scale);
    double want = 0.0;
    std::vector<double> terms(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const float a = x[static_cast<size_t>(i)] * scale - x_max;
      terms[static_cast<size_t>(i)] = a >= -87.0f ? std::exp(static_cast<double>(a)) : 0.0;
      want += terms[static_cast<size_t>(i)];
    }
    for (Isa isa : isas) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " n=" + std::to_string(n));
      std::vector<float> out(static_cast<size_t>(n), -1.0f);
      const double got = exp_affine_sum(x.data(), n, scale, x_max, out.data(), isa);
      EXPECT_NEAR(got, want, 1e-6 * want);
      EXPECT_EQ(out[0], n > 1 ? 0.0f : 1.0f);
      if (n > 3) {
        EXPECT_EQ(out[static_cast<size_t>(n) - 2], 0.0f);
      }
      for (int64_t i = 0; i < n; ++i) {
        const double t = terms[static_cast<size_t>(i)];
        ASSERT_NEAR(out[static_cast<size_t>(i)], t, 1e-6 * t + 1e-37) << i;
        if (x[static_cast<size_t>(i)] * scale == x_max) {
          EXPECT_EQ(out[static_cast<size_t>(i)], 1.0f) << i;
        }
      }
      EXPECT_EQ(exp_affine_sum(x.data(), n, scale, x_max, nullptr, isa), got);  // same bits, with or without out
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
