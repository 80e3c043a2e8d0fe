// Helpers of the CUDA kernel tests: skip without a GPU, device buffers, half conversions on the
// host (through the CPU kernels' converters), NMSE against the CPU result.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "tessera/kernels/cuda/types.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cuda::testing {

inline bool gpu_present() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define TS_REQUIRE_GPU()                                                    \
  do {                                                                      \
    if (!::tessera::kernels::cuda::testing::gpu_present()) {                \
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount failed or is 0)"; \
    }                                                                       \
  } while (0)

#define TS_CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// A typed device array; copies from/to host vectors. Test-only (aborts the test on failure).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) : n_(n) {
    if (n > 0) {
      void* p = nullptr;
      EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
      p_ = static_cast<T*>(p);
    }
  }
  explicit DeviceArray(const std::vector<T>& v) : DeviceArray(v.size()) {
    if (!v.empty()) {
      EXPECT_EQ(cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceArray() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return p_; }
  std::vector<T> to_host() const {
    std::vector<T> v(n_);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return v;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

inline uint16_t to_half_bits(HalfType t, float f) { return t == HalfType::kF16 ? f32_to_fp16(f) : f32_to_bf16(f); }
inline float from_half_bits(HalfType t, uint16_t h) { return t == HalfType::kF16 ? fp16_to_f32(h) : bf16_to_f32(h); }

inline std::vector<float> half_to_float(HalfType t, const std::vector<uint16_t>& h) {
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = from_half_bits(t, h[i]);
  return out;
}

inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// sum (a - b)^2 / sum b^2, b the CPU reference.
inline double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den == 0.0 ? num : num / den;
}

// Tolerance for a value that was rounded once to t on the way out (NMSE of the rounding
// itself is ~ulp^2/12 relative; the margin covers f32 summation-order differences).
inline double rounding_nmse(HalfType t) { return t == HalfType::kF16 ? 1e-6 : 3e-5; }

}  // namespace tessera::kernels::cuda::testing
