// matmul with every ggml block format: each ISA path vs the oracle (the weights dequantized with
// the bit-exact dequantize(), then a double-precision dot). Awkward shapes: rows 1, 7, 33, 257;
// batches 1, 3, 17 (decode GEMV; DecodeRowLengthsMatchScalar: 1 to 3 tokens over row lengths around the GEMV's 8-block groups), batched GEMM, token-block tails); 52 x 20 and 48 x 37
// (the K-quants' AMX 16- and 32-token tiles with AVX-512 4 x 4 tiles beside them; the same
// test runs again with TESSERA_KQUANT_AMX=0 as kernels_quant_no_amx_test); strided x and y.
// Tolerances (normalized mean squared error vs the oracle):
// - integer paths (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL with Q8_0-style activations; Q2_K .. Q6_K,
//   IQ4_XS with Q8_K activations):
//   < 2e-4, the activation quantization (8 bits per value);
// - a SIMD path vs the scalar path: bit-identical (per-block integers, then one shared float
//   reduction order; also the AVX-512 interleaved batch kernels of qblock_tiles.h);
// - every path: the same results with and without a thread pool (the tiles' per-output
//   arithmetic does not depend on how rows and tokens are split).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "tessera/common/quants.h"
#include "tessera/kernels/isa.h"
#include "tessera/kernels/matmul.h"
#include "tessera/kernels/ops.h"
#include "tessera/kernels/thread_pool.h"

namespace tessera::kernels {
namespace {

using testing::nmse;
using testing::random_floats;

const DType kTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                        DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

// Every block format has an integer path now; kept as a predicate for formats added later.
bool integer_path(DType t) { return dtype_is_quantized(t); }

struct Shape {
  int64_t rows, n;
};

class QuantMatmul : public ::testing::TestWithParam<DType> {};

TEST_P(QuantMatmul, EveryIsaMatchesTheDequantizedOracle) {
  const DType t = GetParam();
  ASSERT_TRUE(matmul_supports(t));
  const int64_t cols = dtype_block_size(t) == 256 ? 512 : 352;  // 11 blocks of 32: a full group of 8 lanes and a tail
  ThreadPool pool(3);
  for (const Shape s : {Shape{1, 1}, Shape{7, 3}, Shape{33, 17}, Shape{257, 1}, Shape{257, 17}, Shape{33, 3}, Shape{52, 20}, Shape{48, 37}}) {
    const size_t rb = dtype_row_bytes(t, cols);
    const auto wf = random_floats(static_cast<size_t>(s.rows * cols), 11 + static_cast<uint64_t>(s.rows));
    std::vector<uint8_t> w(rb * static_cast<size_t>(s.rows));
    std::vector<float> wd(wf.size());
    for (int64_t r = 0; r < s.rows; ++r) {
      quantize_row(t, wf.data() + r * cols, w.data() + static_cast<size_t>(r) * rb, cols);
      dequantize(t, w.data() + static_cast<size_t>(r) * rb, wd.data() + r * cols, cols);
    }
    const int64_t x_stride = cols + 5, y_stride = s.rows + 3;
    const auto x = random_floats(static_cast<size_t>(s.n * x_stride), 99 + static_cast<uint64_t>(s.n));
    std::vector<float> oracle(static_cast<size_t>(s.n * s.rows));
    for (int64_t i = 0; i < s.n; ++i) {
      for (int64_t r = 0; r < s.rows; ++r) {
        double acc = 0;
        for (int64_t c = 0; c < cols; ++c) acc += static_cast<double>(wd[static_cast<size_t>(r * cols + c)]) * x[static_cast<size_t>(i * x_stride + c)];
        oracle[static_cast<size_t>(i * s.rows + r)] = static_cast<float>(acc);
      }
    }
    std::vector<float> scalar, unpooled;
    std::vector<Isa> isas = {Isa::kScalar};
    for (Isa i : testing::simd_isas()) isas.push_back(i);
    for (Isa isa : isas) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> y(static_cast<size_t>(s.n * y_stride), -7.0f);
        matmul({.w_type = t, .w = w.data(), .rows = s.rows, .cols = cols, .x = x.data(), .x_stride = x_stride, .n = s.n,
                .y = y.data(), .y_stride = y_stride},
               p, isa);
        std::vector<float> got(oracle.size());
        for (int64_t i = 0; i < s.n; ++i) {
          for (int64_t r = 0; r < s.rows; ++r) got[static_cast<size_t>(i * s.rows + r)] = y[static_cast<size_t>(i * y_stride + r)];
          for (int64_t r = s.rows; r < y_stride; ++r) ASSERT_EQ(y[static_cast<size_t>(i * y_stride + r)], -7.0f);
        }
        const std::string what = std::string(dtype_name(t)) + " " + isa_name(isa) + " rows=" + std::to_string(s.rows) +
                                 " n=" + std::to_string(s.n) + (p ? " pool" : "");
        EXPECT_LT(nmse(got.data(), oracle.data(), got.size()), integer_path(t) ? 2e-4 : 1e-10) << what;
        if (isa == Isa::kScalar && p == nullptr) scalar = got;
        if (p == nullptr) {
          unpooled = got;
        } else {
          EXPECT_EQ(got, unpooled) << what << " vs no pool";
        }
        if (integer_path(t)) {
          EXPECT_EQ(got, scalar) << what << " vs scalar";
        } else {
          EXPECT_LT(nmse(got.data(), scalar.data(), got.size()), 1e-10) << what << " vs scalar";
        }
      }
    }
  }
}

// TESSERA_ISA (set by the kernels_avx2_test / kernels_scalar_isa_test runs) caps what the
// process runs: nothing above the cap is supported, and detect_isa() is the cap (the CPUs these
// runs are configured for have AVX2).
TEST(IsaCap, EnvironmentCapsDetection) {
  const char* env = std::getenv("TESSERA_ISA");
  if (env == nullptr) GTEST_SKIP() << "TESSERA_ISA not set";
  const std::optional<Isa> cap = parse_isa(env);
  ASSERT_TRUE(cap.has_value()) << env;
  ASSERT_EQ(isa_cap(), cap);
  EXPECT_EQ(detect_isa(), *cap);
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(i) > static_cast<int>(*cap)) {
      EXPECT_FALSE(isa_supported(i)) << isa_name(i);
    }
  }
  EXPECT_TRUE(isa_supported(*cap));
}

// The decode GEMV (1 to 3 tokens) over row lengths around its 8-block groups (1, 3, 8, 18 =
// SmolLM2's 576 columns, 25 blocks of 32; 1, 3 super-blocks of 256): every ISA path equals the
// scalar one bit for bit (Q8_0, which has no such contract, within its matmul_test bound).
TEST_P(QuantMatmul, DecodeRowLengthsMatchScalar) {
  const DType t = GetParam();
  const std::vector<int64_t> lengths = dtype_block_size(t) == 256 ? std::vector<int64_t>{256, 768}
                                                                   : std::vector<int64_t>{32, 96, 256, 576, 800};
  for (const int64_t cols : lengths) {
    for (const int64_t n : {1, 2, 3}) {
      const int64_t rows = 37;
      const size_t rb = dtype_row_bytes(t, cols);
      const auto wf = random_floats(static_cast<size_t>(rows * cols), 3 + static_cast<uint64_t>(cols));
      std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) quantize_row(t, wf.data() + r * cols, w.data() + static_cast<size_t>(r) * rb, cols);
      const auto x = random_floats(static_cast<size_t>(n * cols), 7 + static_cast<uint64_t>(n));
      std::vector<float> scalar;
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
        if (!isa_supported(isa)) continue;
        std::vector<float> y(static_cast<size_t>(n * rows));
        matmul({.w_type = t, .w = w.data(), .rows = rows, .cols = cols, .x = x.data(), .x_stride = cols, .n = n, .y = y.data(),
                .y_stride = rows},
               nullptr, isa);
        if (isa == Isa::kScalar) {
          scalar = y;
        } else {
          EXPECT_EQ(y, scalar) << dtype_name(t) << " " << isa_name(isa) << " cols=" << cols << " n=" << n;
        }
      }
    }
  }
}

TEST(QuantMatmul, Q8_0DecodeRowLengthsNearScalar) {
  for (const int64_t cols : {32, 96, 256, 576, 800}) {
    for (const int64_t n : {1, 2, 3}) {
      const int64_t rows = 37;
      const size_t rb = dtype_row_bytes(DType::kQ8_0, cols);
      const auto wf = random_floats(static_cast<size_t>(rows * cols), 3 + static_cast<uint64_t>(cols));
      std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) quantize_row_q8_0(wf.data() + r * cols, w.data() + static_cast<size_t>(r) * rb, cols);
      const auto x = random_floats(static_cast<size_t>(n * cols), 7 + static_cast<uint64_t>(n));
      std::vector<float> scalar;
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
        if (!isa_supported(isa)) continue;
        std::vector<float> y(static_cast<size_t>(n * rows));
        matmul({.w_type = DType::kQ8_0, .w = w.data(), .rows = rows, .cols = cols, .x = x.data(), .x_stride = cols, .n = n,
                .y = y.data(), .y_stride = rows},
               nullptr, isa);
        if (isa == Isa::kScalar) {
          scalar = y;
        } else {
          EXPECT_LT(nmse(y.data(), scalar.data(), y.size()), 1e-10) << isa_name(isa) << " cols=" << cols << " n=" << n;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantMatmul, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// The 32-value formats' batches on AVX-512 (amx_tiles_enabled()): with AMX its tiles (16 rows x 16/32 tokens,
// qblock_amx.cpp) and the VNNI kernels beside them, without AMX (kernels_quant_no_amx_test, or a
// CPU without it) the VNNI kernels alone. Every token count 1..40 (32- and 16-token AMX tiles, a
// partly filled one, tails under 12 tokens on the VNNI kernels), 16 and 50 rows (rows past the
// last 16 on the VNNI kernels), 27 blocks per row (two steps of 8 blocks and a tail of 3),
// strided x and y: bit-identical to the scalar path. Q8_0 (no cross-ISA identity: its VNNI
// tiles sum in one fma accumulator, and so do its AMX tiles) is within f32 rounding of the scalar
// path and bit-identical between its AMX and VNNI batch tiles.
TEST(QuantMatmul, QBlockBatchesMatchTheScalarPathExactly) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 path on this CPU";
  const int64_t cols = 32 * 27, x_stride = cols + 3;
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ8_0}) {
    for (int64_t rows : {16, 50}) {
      const size_t rb = dtype_row_bytes(t, cols);
      const auto wf = random_floats(static_cast<size_t>(rows * cols), 300 + static_cast<uint64_t>(rows));
      std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) quantize_row(t, wf.data() + r * cols, w.data() + static_cast<size_t>(r) * rb, cols);
      const int64_t y_stride = rows + 2;
      std::vector<int64_t> ns;
      for (int64_t n = 1; n <= 40; ++n) ns.push_back(n);
      ns.insert(ns.end(), {48, 100});  // several token blocks of matmul (48): 32 + 16 chunks at t0 > 0
      for (int64_t n : ns) {
        const auto x = random_floats(static_cast<size_t>(n * x_stride), 400 + static_cast<uint64_t>(n));
        std::vector<float> ys(static_cast<size_t>(n * y_stride), -7.0f), yv = ys;
        const MatmulArgs a{.w_type = t, .w = w.data(), .rows = rows, .cols = cols, .x = x.data(), .x_stride = x_stride,
                           .n = n, .y = ys.data(), .y_stride = y_stride};
        matmul(a, nullptr, Isa::kScalar);
        MatmulArgs v = a;
        v.y = yv.data();
        matmul(v, nullptr, Isa::kAvx512);
        const std::string what = std::string(dtype_name(t)) + " rows=" + std::to_string(rows) + " n=" + std::to_string(n);
        if (t != DType::kQ8_0) {
          EXPECT_EQ(yv, ys) << what;
          continue;
        }
        // Q8_0 batches of 4 or more tokens (AMX or VNNI tiles): bit for bit the same however the
        // batch is cut (here: against 4-token batches, which never take the AMX tiles), and
        // within f32 rounding of the scalar path.
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_LT(nmse(yv.data() + i * y_stride, ys.data() + i * y_stride, static_cast<size_t>(rows)), 1e-10) << what << " token " << i;
          for (int64_t r = rows; r < y_stride; ++r) ASSERT_EQ(yv[static_cast<size_t>(i * y_stride + r)], -7.0f) << what;
        }
        for (int64_t b = 0; n >= 4 && b < n; b += 4) {
          const int64_t first = std::min<int64_t>(b, n - 4);
          std::vector<float> y4(static_cast<size_t>(4 * y_stride));
          MatmulArgs q = v;
          q.x = x.data() + first * x_stride;
          q.n = 4;
          q.y = y4.data();
          matmul(q, nullptr, Isa::kAvx512);
          for (int64_t i = 0; i < 4; ++i) {
            for (int64_t r = 0; r < rows; ++r) {
              ASSERT_EQ(yv[static_cast<size_t>((first + i) * y_stride + r)], y4[static_cast<size_t>(i * y_stride + r)])
                  << what << " token " << first + i << " row " << r;
            }
          }
        }
      }
    }
  }
}

// Q, K and V projections of the same activations in one call share one activation quantization
// and give the same results as three separate calls.
TEST(QuantMatmul, BatchOfMixedTypesEqualsSeparateCalls) {
  const int64_t cols = 256, n = 5;
  const DType types[] = {DType::kQ4_K, DType::kQ6_K, DType::kQ5_0};
  const int64_t rows[] = {16, 9, 33};
  const auto x = random_floats(static_cast<size_t>(n * cols), 5);
  std::vector<std::vector<uint8_t>> ws;
  std::vector<std::vector<float>> batched, single;
  std::vector<MatmulArgs> list;
  for (int k = 0; k < 3; ++k) {
    const auto f = random_floats(static_cast<size_t>(rows[k] * cols), 70 + static_cast<uint64_t>(k));
    const size_t rb = dtype_row_bytes(types[k], cols);
    ws.emplace_back(rb * static_cast<size_t>(rows[k]));
    for (int64_t r = 0; r < rows[k]; ++r) quantize_row(types[k], f.data() + r * cols, ws.back().data() + r * rb, cols);
    batched.emplace_back(static_cast<size_t>(n * rows[k]));
    single.emplace_back(static_cast<size_t>(n * rows[k]));
  }
  ThreadPool pool(2);
  for (Isa isa : {Isa::kScalar, detect_isa()}) {
    list.clear();
    for (int k = 0; k < 3; ++k) {
      const MatmulArgs a{.w_type = types[k], .w = ws[static_cast<size_t>(k)].data(), .rows = rows[k], .cols = cols, .x = x.data(),
                         .x_stride = cols, .n = n, .y = batched[static_cast<size_t>(k)].data(), .y_stride = rows[k]};
      list.push_back(a);
      MatmulArgs b = a;
      b.y = single[static_cast<size_t>(k)].data();
      matmul(b, &pool, isa);
    }
    matmul_batch(list, &pool, isa);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(batched[static_cast<size_t>(k)], single[static_cast<size_t>(k)]) << dtype_name(types[k]);
  }
}

// Q4_K / Q5_K blocks of arbitrary bytes (every 6-bit scale and min, every 4- and 5-bit value),
// the first rows with every scale and min at 63 and every value at its maximum: the AMX tiles
// fold the scales into byte operands (q * (s & 7), q * (s >> 3)), so the extremes must stay
// exact. Each SIMD path equals the scalar one bit for bit, for 16- and 32-token AMX tiles and
// their edges.
TEST(QuantMatmul, KQuantExtremeScalesMatchScalar) {
  const int64_t cols = 512, rows = 40;
  std::mt19937 rng(17);
  for (const DType t : {DType::kQ4_K, DType::kQ5_K}) {
    const size_t rb = dtype_row_bytes(t, cols);
    std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
    for (auto& b : w) b = static_cast<uint8_t>(rng());
    const size_t block = rb / static_cast<size_t>(cols / 256);
    for (size_t off = 0; off < w.size(); off += block) {
      const uint16_t d = 0x1C00, dmin = 0x1800;  // fp16 1/256 and 1/512: finite scales
      std::memcpy(&w[off], &d, 2);
      std::memcpy(&w[off + 2], &dmin, 2);
      if (off < 8 * rb) std::memset(&w[off + 4], 0xFF, block - 4);  // rows 0..7: all maxima
    }
    for (const int64_t n : {int64_t{16}, int64_t{32}, int64_t{37}}) {
      const auto x = random_floats(static_cast<size_t>(n * cols), 300 + static_cast<uint64_t>(n));
      std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size());
      matmul({.w_type = t, .w = w.data(), .rows = rows, .cols = cols, .x = x.data(), .x_stride = cols, .n = n,
              .y = want.data(), .y_stride = rows},
             nullptr, Isa::kScalar);
      for (Isa isa : testing::simd_isas()) {
        matmul({.w_type = t, .w = w.data(), .rows = rows, .cols = cols, .x = x.data(), .x_stride = cols, .n = n,
                .y = got.data(), .y_stride = rows},
               nullptr, isa);
        EXPECT_EQ(got, want) << dtype_name(t) << " " << isa_name(isa) << " n=" << n;
      }
    }
  }
}

// The few-token tiles (1 to 5 tokens: an expert's share of a batched decode step) at the
// extremes: blocks of arbitrary bytes, the first rows with every value at its maximum, and
// activations whose Q8_K values reach -127 and 127 in every 4-value group of the first tokens.
// The unsigned formats' tiles sum 4 products per int32 and pack them to int16 (vpdpbusd,
// vpackssdw: |4 * 63 * 127| < 2^15 for Q6_K), so these must stay exact: each SIMD path equals
// the scalar one bit for bit, with and without a thread pool.
TEST(QuantMatmul, KQuantFewTokenTilesMatchScalarAtExtremes) {
  const int64_t cols = 512, rows = 45;
  std::mt19937 rng(23);
  ThreadPool pool(2);
  for (const DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ2_K, DType::kQ3_K}) {
    const size_t rb = dtype_row_bytes(t, cols);
    std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
    for (auto& b : w) b = static_cast<uint8_t>(rng());
    const size_t block = rb / static_cast<size_t>(cols / 256);
    for (size_t off = 0; off < w.size(); off += block) {  // finite fp16 scales wherever the format keeps them
      const uint16_t d = 0x1C00, dmin = 0x1800;
      const size_t at = t == DType::kQ6_K ? 208 : t == DType::kQ2_K ? 80 : t == DType::kQ3_K ? 108 : 0;
      std::memcpy(&w[off + at], &d, 2);
      if (t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ2_K) std::memcpy(&w[off + at + 2], &dmin, 2);
      if (off < 8 * rb) {  // rows 0..7: every value byte at its maximum (scales stay arbitrary for Q6_K / Q3_K: signed)
        const size_t end = t == DType::kQ6_K ? 192 : t == DType::kQ3_K ? 96 : t == DType::kQ2_K ? 80 : block;
        const size_t begin = t == DType::kQ6_K || t == DType::kQ3_K ? 0 : t == DType::kQ2_K ? 16 : 4;
        std::memset(&w[off + begin], 0xFF, end - begin);
      }
    }
    for (int64_t n = 1; n <= 5; ++n) {
      auto x = random_floats(static_cast<size_t>(n * cols), 500 + static_cast<uint64_t>(n));
      for (int64_t i = 0; i < cols; ++i) {  // token 0: +-1 alternating by 4 values; token 1: all -1
        x[static_cast<size_t>(i)] = (i / 4) % 2 == 0 ? 1.0f : -1.0f;
        if (n > 1) x[static_cast<size_t>(cols + i)] = -1.0f;
      }
      std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size());
      matmul({.w_type = t, .w = w.data(), .rows = rows, .cols = cols, .x = x.data(), .x_stride = cols, .n = n,
              .y = want.data(), .y_stride = rows},
             nullptr, Isa::kScalar);
      for (Isa isa : testing::simd_isas()) {
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::fill(got.begin(), got.end(), -7.0f);
          matmul({.w_type = t, .w = w.data(), .rows = rows, .cols = cols, .x = x.data(), .x_stride = cols, .n = n,
                  .y = got.data(), .y_stride = rows},
                 p, isa);
          EXPECT_EQ(got, want) << dtype_name(t) << " " << isa_name(isa) << " n=" << n << (p ? " pool" : "");
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
