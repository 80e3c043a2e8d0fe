// exp_affine_sum (tessera/kernels/softmax.h): every ISA path against double-precision exp (relative
// error under 1e-6 per term and for the sum) over
// rows of awkward lengths (tails of 1..15 lanes), terms at -inf or below -87 exactly 0, the
// row's maximum exactly 1, the same bits on every call. argmax: every path is the scalar walk
// (lowest index of the largest value) on rows with ties, signed zeros, -inf and NaNs.
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

int64_t walk(const std::vector<float>& x) {
  int64_t best = 0;
  for (size_t i = 1; i < x.size(); ++i) {
    if (x[i] > x[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  }
  return best;
}

TEST(Argmax, EveryPathIsTheScalarWalk) {
  std::vector<Isa> isas = testing::simd_isas();
  isas.push_back(Isa::kScalar);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> rows;
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 49152}) {
    std::vector<float> x = testing::random_floats(static_cast<size_t>(n), static_cast<uint64_t>(n) + 7, -8.0f, 8.0f);
    for (float& v : x) v = std::round(v * 2.0f) / 2.0f;  // many ties
    rows.push_back(x);
    std::vector<float> last = x;  // the largest value last (in the tail lanes)
    last.back() = 100.0f;
    rows.push_back(last);
    std::vector<float> first = x;
    first.front() = 100.0f;
    first.back() = 100.0f;  // a tie with the first: the first wins
    rows.push_back(first);
    rows.push_back(std::vector<float>(static_cast<size_t>(n), -inf));
    std::vector<float> zeros(static_cast<size_t>(n), -1.0f);  // -0 and +0 compare equal
    zeros[static_cast<size_t>(n) / 2] = -0.0f;
    zeros.back() = 0.0f;
    rows.push_back(zeros);
    for (size_t at : {size_t{0}, static_cast<size_t>(n) / 3, static_cast<size_t>(n) - 1}) {
      std::vector<float> with_nan = x;  // the walk's answer depends on where the NaN is
      with_nan[at] = nan;
      rows.push_back(with_nan);
    }
  }
  for (Isa isa : isas) {
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto& x = rows[r];
      ASSERT_EQ(argmax(x.data(), static_cast<int64_t>(x.size()), isa), walk(x))
          << isa_name(isa) << " row " << r << " of " << x.size();
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
