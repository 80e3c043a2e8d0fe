// matmul: every SIMD path vs the scalar oracle, and the scalar oracle vs a double-precision
// product over the dequantized weights. Awkward shapes: rows 1, 3, 111, 500; odd column
// counts for float weights; token counts 1, 3, 7, 17, 50 (tile and block tails).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "kernel_test_util.h"
#include "tessera/kernels/matmul.h"
#include "tessera/kernels/ops.h"
#include "tessera/kernels/thread_pool.h"

namespace tessera::kernels {
namespace {

using testing::nmse;
using testing::random_floats;

// Weights of `rows x cols` in dtype t, built from random floats.
std::vector<uint8_t> make_weights(DType t, int64_t rows, int64_t cols, uint64_t seed) {
  const auto f = random_floats(static_cast<size_t>(rows * cols), seed);
  const size_t rb = dtype_row_bytes(t, cols);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = f.data() + r * cols;
    uint8_t* dst = w.data() + static_cast<size_t>(r) * rb;
    for (int64_t c = 0; c < cols; ++c) {
      if (t == DType::kF32) {
        std::memcpy(dst + 4 * c, &src[c], 4);
      } else if (t == DType::kF16 || t == DType::kBF16) {
        const uint16_t h = t == DType::kF16 ? f32_to_fp16(src[c]) : f32_to_bf16(src[c]);
        std::memcpy(dst + 2 * c, &h, 2);
      }
    }
    if (t == DType::kQ8_0) quantize_row_q8_0(src, dst, cols);
  }
  return w;
}

struct Case {
  DType dtype;
  int64_t rows, cols, n;
};

std::vector<float> run(const Case& c, const std::vector<uint8_t>& w, const std::vector<float>& x, Isa isa,
                       ThreadPool* pool) {
  const int64_t y_stride = c.rows + 3;  // non-contiguous output rows
  std::vector<float> y(static_cast<size_t>(c.n * y_stride), -7.0f);
  matmul({.w_type = c.dtype, .w = w.data(), .rows = c.rows, .cols = c.cols, .x = x.data(), .x_stride = c.cols + 5,
          .n = c.n, .y = y.data(), .y_stride = y_stride},
         pool, isa);
  std::vector<float> packed(static_cast<size_t>(c.n * c.rows));
  for (int64_t t = 0; t < c.n; ++t) {
    for (int64_t r = 0; r < c.rows; ++r) packed[static_cast<size_t>(t * c.rows + r)] = y[static_cast<size_t>(t * y_stride + r)];
    // Padding between rows is untouched.
    for (int64_t r = c.rows; r < y_stride; ++r) EXPECT_EQ(y[static_cast<size_t>(t * y_stride + r)], -7.0f);
  }
  return packed;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    const bool blocked = t == DType::kQ8_0;
    for (int64_t rows : {1, 3, 111, 500}) {
      for (int64_t cols : blocked ? std::vector<int64_t>{32, 96, 32 * 7, 32 * 18} : std::vector<int64_t>{1, 17, 32 * 3 + 5, 577}) {
        for (int64_t n : {1, 3, 7, 17, 50}) {
          if (rows * cols * n > 8'000'000) continue;
          out.push_back({t, rows, cols, n});
        }
      }
    }
  }
  return out;
}

std::string name(const Case& c) {
  return std::string(dtype_name(c.dtype)) + " rows=" + std::to_string(c.rows) + " cols=" + std::to_string(c.cols) +
         " n=" + std::to_string(c.n);
}

TEST(Matmul, ScalarMatchesDoublePrecisionReference) {
  for (const Case& c : cases()) {
    if (c.n > 7) continue;
    const auto w = make_weights(c.dtype, c.rows, c.cols, 11);
    const auto x = random_floats(static_cast<size_t>(c.n * (c.cols + 5)), 12);
    const auto y = run(c, w, x, Isa::kScalar, nullptr);
    std::vector<float> ref(y.size());
    std::vector<float> wr(static_cast<size_t>(c.cols));
    for (int64_t r = 0; r < c.rows; ++r) {
      dequantize_row(c.dtype, w.data() + r * dtype_row_bytes(c.dtype, c.cols), wr.data(), c.cols);
      for (int64_t t = 0; t < c.n; ++t) {
        double acc = 0.0;
        for (int64_t k = 0; k < c.cols; ++k) acc += static_cast<double>(wr[static_cast<size_t>(k)]) * x[static_cast<size_t>(t * (c.cols + 5) + k)];
        ref[static_cast<size_t>(t * c.rows + r)] = static_cast<float>(acc);
      }
    }
    // Float weights: only f32 rounding of the sums (NMSE ~1e-13). Q8_0: the activations are
    // quantized to 8 bits per block (error up to amax/254 per element: NMSE ~1e-5 on
    // average, up to ~3e-4 for the shortest rows where the dot product partly cancels).
    const double tol = c.dtype == DType::kQ8_0 ? 1e-3 : 1e-10;
    EXPECT_LT(nmse(y.data(), ref.data(), y.size()), tol) << name(c);
  }
}

TEST(Matmul, SimdPathsMatchScalarOracle) {
  const auto isas = testing::simd_isas();
  if (isas.empty()) GTEST_SKIP() << "no SIMD path on this CPU";
  ThreadPool pool(3);
  for (const Case& c : cases()) {
    const auto w = make_weights(c.dtype, c.rows, c.cols, 21);
    const auto x = random_floats(static_cast<size_t>(c.n * (c.cols + 5)), 22);
    const auto ref = run(c, w, x, Isa::kScalar, nullptr);
    for (Isa isa : isas) {
      const auto y = run(c, w, x, isa, &pool);
      // Same products, different summation order (and for Q8_0 the same quantized
      // activations): differences are f32 rounding only.
      EXPECT_LT(nmse(y.data(), ref.data(), y.size()), 1e-10) << name(c) << " isa=" << isa_name(isa);
    }
  }
}

TEST(Matmul, ThreadedEqualsSingleThreadedExactly) {
  ThreadPool pool(4);
  const Case c{DType::kQ8_0, 333, 32 * 9, 61};
  const auto w = make_weights(c.dtype, c.rows, c.cols, 5);
  const auto x = random_floats(static_cast<size_t>(c.n * (c.cols + 5)), 6);
  for (Isa isa : {Isa::kScalar, testing::simd_isas().empty() ? Isa::kScalar : testing::simd_isas().back()}) {
    EXPECT_EQ(run(c, w, x, isa, &pool), run(c, w, x, isa, nullptr)) << isa_name(isa);
  }
}

TEST(Matmul, Q8ExtremeWeightsDoNotOverflow) {
  // All weights -128 (representable in a file though never produced by the quantizer) and
  // activations at full scale: the int8 paths must not saturate.
  const int64_t rows = 5, cols = 64, n = 2;
  std::vector<uint8_t> w(dtype_row_bytes(DType::kQ8_0, cols) * rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      uint8_t* blk = w.data() + r * dtype_row_bytes(DType::kQ8_0, cols) + b * 34;
      const uint16_t d = f32_to_fp16(0.5f);
      std::memcpy(blk, &d, 2);
      std::memset(blk + 2, 0x80, 32);
    }
  }
  std::vector<float> x(static_cast<size_t>(n * (cols + 5)), 1.0f);
  const Case c{DType::kQ8_0, rows, cols, n};
  // Activations 1.0 quantize to 127 with ggml's fp16 block scale fp16(1/127) (not exactly 1/127).
  const float want = -128.0f * 0.5f * 64.0f * 127.0f * fp16_to_f32(f32_to_fp16(1.0f / 127.0f));
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    for (float v : run(c, w, x, isa, nullptr)) EXPECT_NEAR(v, want, 1e-2) << isa_name(isa);
  }
}

}  // namespace
}  // namespace tessera::kernels

namespace tessera::kernels {
namespace {

TEST(Matmul, BatchEqualsSeparateCallsExactly) {
  ThreadPool pool(3);
  const int64_t cols = 96, n = 21;
  const auto x = testing::random_floats(static_cast<size_t>(n * cols), 31);
  const auto x2 = testing::random_floats(static_cast<size_t>(n * cols), 32);
  const auto wq = make_weights(DType::kQ8_0, 70, cols, 1), wk = make_weights(DType::kQ8_0, 33, cols, 2),
             wf = make_weights(DType::kF16, 5, cols, 3), wq2 = make_weights(DType::kQ8_0, 17, cols, 4);
  struct Out {
    const std::vector<uint8_t>* w;
    DType t;
    int64_t rows;
    const std::vector<float>* x;
  };
  const std::vector<Out> outs = {{&wq, DType::kQ8_0, 70, &x}, {&wk, DType::kQ8_0, 33, &x}, {&wf, DType::kF16, 5, &x},
                                 {&wq2, DType::kQ8_0, 17, &x2}};
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    std::vector<std::vector<float>> batched(outs.size()), separate(outs.size());
    std::vector<MatmulArgs> list;
    for (size_t i = 0; i < outs.size(); ++i) {
      batched[i].assign(static_cast<size_t>(n * outs[i].rows), 0.0f);
      separate[i].assign(static_cast<size_t>(n * outs[i].rows), 0.0f);
      const MatmulArgs a{.w_type = outs[i].t, .w = outs[i].w->data(), .rows = outs[i].rows, .cols = cols,
                         .x = outs[i].x->data(), .x_stride = cols, .n = n, .y = batched[i].data(), .y_stride = outs[i].rows};
      list.push_back(a);
      MatmulArgs b = a;
      b.y = separate[i].data();
      matmul(b, nullptr, isa);
    }
    matmul_batch(list, &pool, isa);
    for (size_t i = 0; i < outs.size(); ++i) EXPECT_EQ(batched[i], separate[i]) << i << " " << isa_name(isa);
  }
}

}  // namespace
}  // namespace tessera::kernels
