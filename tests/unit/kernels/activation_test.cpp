// swiglu (tessera/kernels/activation.h): every SIMD path against the scalar silu_mul (the oracle)
// and against the formula in double, over awkward row lengths (vector tails of 1..15), strided
// rows, in place, large |gate| (exp's clamp at -87), zeros and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "tessera/kernels/activation.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {
namespace {

double silu_ref(float g, float u) { return static_cast<double>(g) / (1.0 + std::exp(-static_cast<double>(g))) * u; }

TEST(Swiglu, EveryPathMatchesTheScalarOracleWithin2e6Relative) {
  std::vector<Isa> isas = testing::simd_isas();
  isas.push_back(Isa::kScalar);
  for (int64_t cols : {1, 7, 8, 15, 16, 17, 33, 111, 1536}) {
    const int64_t n = 3, gs = cols + 5, us = cols + 3, os = cols + 1;  // strided rows
    std::vector<float> g = testing::random_floats(static_cast<size_t>(n * gs), static_cast<uint64_t>(cols), -12.0f, 12.0f);
    const std::vector<float> u = testing::random_floats(static_cast<size_t>(n * us), static_cast<uint64_t>(cols) + 7, -3.0f, 3.0f);
    const float specials[] = {0.0f, -0.0f, 90.0f, -90.0f, 200.0f, -200.0f, 1e-30f, -1e-30f, 87.5f, -86.9f};
    for (size_t i = 0; i < std::size(specials) && i < static_cast<size_t>(cols); ++i) g[i * 2 % static_cast<size_t>(cols)] = specials[i];
    std::vector<float> oracle(static_cast<size_t>(n * os));
    silu_mul(g.data(), gs, u.data(), us, oracle.data(), os, n, cols);
    for (Isa isa : isas) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " cols=" + std::to_string(cols));
      std::vector<float> out(static_cast<size_t>(n * os), 12345.0f);
      swiglu(g.data(), gs, u.data(), us, out.data(), os, n, cols, isa);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t c = 0; c < cols; ++c) {
          const float got = out[static_cast<size_t>(t * os + c)], want = oracle[static_cast<size_t>(t * os + c)];
          const double exact = silu_ref(g[static_cast<size_t>(t * gs + c)], u[static_cast<size_t>(t * us + c)]);
          ASSERT_NEAR(got, want, 2e-6 * std::fabs(want) + 1e-30) << "row " << t << " col " << c << " gate " << g[static_cast<size_t>(t * gs + c)];
          ASSERT_NEAR(got, exact, 2e-6 * std::fabs(exact) + 1e-30) << "row " << t << " col " << c;
        }
        for (int64_t c = cols; c < os; ++c) ASSERT_EQ(out[static_cast<size_t>(t * os + c)], 12345.0f) << "wrote past the row";
      }
      if (isa == Isa::kScalar) {
        EXPECT_EQ(out[0], oracle[0]);  // the scalar path is silu_mul itself
      }
    }
  }
}

TEST(Swiglu, InPlaceOverGateAndNaNPropagates) {
  for (Isa isa : testing::simd_isas()) {
    SCOPED_TRACE(isa_name(isa));
    const int64_t cols = 40;
    std::vector<float> g = testing::random_floats(static_cast<size_t>(cols), 11, -5.0f, 5.0f);
    std::vector<float> u = testing::random_floats(static_cast<size_t>(cols), 12);
    g[3] = std::numeric_limits<float>::quiet_NaN();
    u[20] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> want(static_cast<size_t>(cols));
    silu_mul(g.data(), cols, u.data(), cols, want.data(), cols, 1, cols);
    swiglu(g.data(), cols, u.data(), cols, g.data(), cols, 1, cols, isa);  // out == gate
    for (int64_t c = 0; c < cols; ++c) {
      if (c == 3 || c == 20) {
        EXPECT_TRUE(std::isnan(g[static_cast<size_t>(c)])) << c;
      } else {
        EXPECT_NEAR(g[static_cast<size_t>(c)], want[static_cast<size_t>(c)], 2e-6 * std::fabs(want[static_cast<size_t>(c)]) + 1e-30) << c;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
