// Helpers shared by the kernel tests: deterministic random data, NMSE, the ISA paths to test.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tessera/kernels/isa.h"

namespace tessera::kernels::testing {

inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Normalized mean squared error: sum (a - b)^2 / sum b^2 (b is the reference).
inline double nmse(const float* a, const float* b, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den == 0.0 ? num : num / den;
}

inline std::vector<Isa> simd_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kAvx2, Isa::kAvx512}) {
    if (isa_supported(i)) out.push_back(i);
  }
  return out;
}

}  // namespace tessera::kernels::testing
