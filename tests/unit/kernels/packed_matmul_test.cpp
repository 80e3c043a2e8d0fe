// matmul over PackedWeights (packed_weights.h: the load-time 16-row interleaved copy of Q4_0,
// Q4_1, Q5_0, Q5_1, IQ4_NL weights; Q4_K's, Q5_K's and Q6_K's super-block layouts on AVX-512) vs the scalar oracle on
// the unpacked weights: bit-identical for every shape, batch size and thread split (Q8_0: vs the unpacked AVX-512 path). Ragged shapes: rows not a multiple of 16 (the
// last group's missing rows are padding), odd block counts (the last pair of blocks has a zero
// partner), cols 32 .. 4096; tokens 1, 2, 3 (decode) and 5, 17 (batches); strided x and y, with
// y's padding left alone. On the AVX-512 kernel and on the AVX2 one, each where the CPU (and
// TESSERA_ISA) allows.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "tessera/common/quants.h"
#include "tessera/kernels/isa.h"
#include "tessera/kernels/matmul.h"
#include "tessera/kernels/packed_weights.h"
#include "tessera/kernels/thread_pool.h"

namespace tessera::kernels {
namespace {

using testing::random_floats;

const DType kPackable[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL};

struct Shape {
  int64_t rows, cols;
};
const Shape kShapes32[] = {{1, 32}, {7, 96}, {16, 576}, {33, 352}, {40, 4096}, {257, 544}, {64, 288}};
// The K-quants: super-blocks of 256 columns.
const Shape kShapes256[] = {{1, 256}, {7, 512}, {16, 768}, {33, 256}, {40, 4096}, {257, 1536}, {64, 2048}};

void check_packed_matmul(DType t, Isa isa, std::span<const Shape> shapes) {
  SCOPED_TRACE(isa_name(isa));
  ThreadPool pool(3);
  for (const Shape s : shapes) {
    const size_t rb = dtype_row_bytes(t, s.cols);
    const auto wf = random_floats(static_cast<size_t>(s.rows * s.cols), 3 + static_cast<uint64_t>(s.rows * s.cols));
    std::vector<uint8_t> w(rb * static_cast<size_t>(s.rows));
    for (int64_t r = 0; r < s.rows; ++r) quantize_row(t, wf.data() + r * s.cols, w.data() + static_cast<size_t>(r) * rb, s.cols);
    const PackedWeights packed = pack_for_matmul(t, w.data(), s.rows, s.cols, isa);
    ASSERT_FALSE(packed.empty());
    EXPECT_EQ(packed.bytes() % 64, 0u);
    EXPECT_EQ(packed.n_groups(), (s.rows + 15) / 16);
    const bool kquant = t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
    const std::vector<int64_t> ns = kquant ? std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 33}
                                           : std::vector<int64_t>{1, 2, 3, 5, 17};
    for (const int64_t n : ns) {
      const int64_t x_stride = s.cols + 3, y_stride = s.rows + 5;
      const auto x = random_floats(static_cast<size_t>(n * x_stride), 50 + static_cast<uint64_t>(n), -2.0f, 2.0f);
      const MatmulArgs base{.w_type = t, .w = w.data(), .rows = s.rows, .cols = s.cols, .x = x.data(), .x_stride = x_stride,
                            .n = n, .y = nullptr, .y_stride = y_stride};
      std::vector<float> oracle(static_cast<size_t>(n * y_stride), -7.0f);
      MatmulArgs a = base;
      a.y = oracle.data();
      matmul(a, nullptr, Isa::kScalar);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> y(oracle.size(), -7.0f);
        a = base;
        a.y = y.data();
        a.w_packed = &packed;
        matmul(a, p, isa);
        const std::string what = std::string(dtype_name(t)) + " rows=" + std::to_string(s.rows) +
                                 " cols=" + std::to_string(s.cols) + " n=" + std::to_string(n) + (p ? " pool" : "");
        ASSERT_EQ(y, oracle) << what;  // the padding (-7) included
      }
    }
  }
}

class PackedMatmul : public ::testing::TestWithParam<DType> {};

TEST_P(PackedMatmul, BitIdenticalToTheScalarOracle) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "no AVX2 here (or TESSERA_ISA caps it)";
  for (const Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (isa_supported(isa)) check_packed_matmul(GetParam(), isa, kShapes32);
  }
}

// Q4_K, Q5_K and Q6_K (kquant_packed.h, AVX-512 only): bit-identical to the scalar oracle too, rows not a
// multiple of 16, 1 .. 16 super-blocks per row, decode and batches (4-token steps and their tails).
TEST(PackedMatmul, Q4_KBitIdenticalToTheScalarOracle) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 VNNI here (or TESSERA_ISA caps it)";
  check_packed_matmul(DType::kQ4_K, Isa::kAvx512, kShapes256);
}
TEST(PackedMatmul, Q5_KBitIdenticalToTheScalarOracle) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 VNNI here (or TESSERA_ISA caps it)";
  check_packed_matmul(DType::kQ5_K, Isa::kAvx512, kShapes256);
}
TEST(PackedMatmul, Q6_KBitIdenticalToTheScalarOracle) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 VNNI here (or TESSERA_ISA caps it)";
  check_packed_matmul(DType::kQ6_K, Isa::kAvx512, kShapes256);
}

INSTANTIATE_TEST_SUITE_P(Packable, PackedMatmul, ::testing::ValuesIn(kPackable),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// With w_packed the kernel reads the packed copy only: packed from other weights, the result is
// theirs (so the test above did run the packed path).
void check_reads_the_packed_copy(DType t, int64_t cols) {
  const int64_t rows = 33, n = 2;
  const size_t rb = dtype_row_bytes(t, cols);
  std::vector<uint8_t> w1(rb * rows), w2(rb * rows);
  const auto f1 = random_floats(static_cast<size_t>(rows * cols), 1), f2 = random_floats(static_cast<size_t>(rows * cols), 2);
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(t, f1.data() + r * cols, w1.data() + r * rb, cols);
    quantize_row(t, f2.data() + r * cols, w2.data() + r * rb, cols);
  }
  const auto x = random_floats(static_cast<size_t>(n * cols), 9);
  std::vector<float> want(static_cast<size_t>(n * rows));
  matmul({.w_type = t, .w = w2.data(), .rows = rows, .cols = cols, .x = x.data(), .x_stride = cols, .n = n, .y = want.data(),
          .y_stride = rows},
         nullptr, Isa::kScalar);
  int ran = 0;
  for (const Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (!packed_matmul_supports(t, isa)) continue;
    const PackedWeights p2 = pack_for_matmul(t, w2.data(), rows, cols, isa);
    std::vector<float> got(want.size());
    matmul({.w_type = t, .w = w1.data(), .rows = rows, .cols = cols, .x = x.data(), .x_stride = cols, .n = n, .y = got.data(),
            .y_stride = rows, .w_packed = &p2},
           nullptr, isa);
    EXPECT_EQ(got, want) << dtype_name(t) << " " << isa_name(isa);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "no packed path here (or TESSERA_ISA caps it)";
}

TEST(PackedMatmul, ReadsThePackedCopy) { check_reads_the_packed_copy(DType::kQ4_0, 352); }
TEST(PackedMatmul, Q4_KReadsThePackedCopy) { check_reads_the_packed_copy(DType::kQ4_K, 768); }
TEST(PackedMatmul, Q5_KReadsThePackedCopy) { check_reads_the_packed_copy(DType::kQ5_K, 768); }
TEST(PackedMatmul, Q6_KReadsThePackedCopy) { check_reads_the_packed_copy(DType::kQ6_K, 768); }

// Q8_0 (qblock_packed_q8.h) has no bit-identity with the scalar oracle; packed, it is
// bit-identical to the unpacked AVX-512 path: decode (1..3 tokens) in gemm_q8_0's order, batches
// in the VNNI batch tiles' (and, with AMX, 12+ tokens on the AMX tiles with the token tail on
// the packed copy), including a token block's 1-token tail (n = 49: 48 + 1).
TEST(PackedMatmul, Q8_0BitIdenticalToTheUnpackedAvx512Path) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 VNNI here (or TESSERA_ISA caps it)";
  const DType t = DType::kQ8_0;
  ThreadPool pool(3);
  for (const Shape s : {Shape{1, 32}, Shape{7, 96}, Shape{16, 576}, Shape{33, 352}, Shape{40, 1536}, Shape{257, 544}}) {
    const size_t rb = dtype_row_bytes(t, s.cols);
    const auto wf = random_floats(static_cast<size_t>(s.rows * s.cols), 5 + static_cast<uint64_t>(s.rows * s.cols));
    std::vector<uint8_t> w(rb * static_cast<size_t>(s.rows));
    for (int64_t r = 0; r < s.rows; ++r) quantize_row(t, wf.data() + r * s.cols, w.data() + static_cast<size_t>(r) * rb, s.cols);
    const PackedWeights packed = pack_for_matmul(t, w.data(), s.rows, s.cols, Isa::kAvx512);
    ASSERT_FALSE(packed.empty());
    EXPECT_EQ(packed.bytes() % 64, 0u);
    EXPECT_EQ(packed.bytes(), static_cast<size_t>((s.rows + 15) / 16 * ((s.cols / 32 + 1) / 2) * 1088));
    for (const int64_t n : {1, 2, 3, 4, 5, 12, 17, 33, 49}) {
      const int64_t x_stride = s.cols + 3, y_stride = s.rows + 5;
      const auto x = random_floats(static_cast<size_t>(n * x_stride), 70 + static_cast<uint64_t>(n), -2.0f, 2.0f);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        MatmulArgs a{.w_type = t, .w = w.data(), .rows = s.rows, .cols = s.cols, .x = x.data(), .x_stride = x_stride,
                     .n = n, .y = nullptr, .y_stride = y_stride};
        std::vector<float> want(static_cast<size_t>(n * y_stride), -7.0f), got(want.size(), -7.0f);
        a.y = want.data();
        matmul(a, p, Isa::kAvx512);
        a.y = got.data();
        a.w_packed = &packed;
        matmul(a, p, Isa::kAvx512);
        ASSERT_EQ(got, want) << "rows=" << s.rows << " cols=" << s.cols << " n=" << n << (p ? " pool" : "");
      }
    }
  }
}

// Packed from other weights, the Q8_0 result is theirs: every path reads the packed copy (decode,
// the VNNI batch tiles, and with AMX its packed-copy tiles).
TEST(PackedMatmul, Q8_0ReadsThePackedCopy) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 VNNI here (or TESSERA_ISA caps it)";
  const DType t = DType::kQ8_0;
  const int64_t rows = 33, cols = 352;
  const size_t rb = dtype_row_bytes(t, cols);
  std::vector<uint8_t> w1(rb * rows), w2(rb * rows);
  const auto f1 = random_floats(static_cast<size_t>(rows * cols), 1), f2 = random_floats(static_cast<size_t>(rows * cols), 2);
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(t, f1.data() + r * cols, w1.data() + r * rb, cols);
    quantize_row(t, f2.data() + r * cols, w2.data() + r * rb, cols);
  }
  const PackedWeights p2 = pack_for_matmul(t, w2.data(), rows, cols, Isa::kAvx512);
  for (const int64_t n : {1, 5, 17, 40}) {
    const auto x = random_floats(static_cast<size_t>(n * cols), 9);
    std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size());
    matmul({.w_type = t, .w = w2.data(), .rows = rows, .cols = cols, .x = x.data(), .x_stride = cols, .n = n, .y = want.data(),
            .y_stride = rows},
           nullptr, Isa::kAvx512);
    matmul({.w_type = t, .w = w1.data(), .rows = rows, .cols = cols, .x = x.data(), .x_stride = cols, .n = n, .y = got.data(),
            .y_stride = rows, .w_packed = &p2},
           nullptr, Isa::kAvx512);
    EXPECT_EQ(got, want) << "n=" << n;
  }
}

// No packed path: an empty PackedWeights, which matmul ignores.
TEST(PackedMatmul, OtherTypesAndIsasGiveNothingToPack) {
  const std::vector<uint8_t> w(dtype_row_bytes(DType::kQ8_0, 64) * 4);
  EXPECT_TRUE(pack_for_matmul(DType::kQ8_0, w.data(), 4, 64, Isa::kAvx2).empty());
  EXPECT_TRUE(pack_for_matmul(DType::kQ3_K, w.data(), 1, 256, Isa::kAvx512).empty());
  EXPECT_TRUE(pack_for_matmul(DType::kQ4_K, w.data(), 1, 256, Isa::kAvx2).empty());
  EXPECT_TRUE(pack_for_matmul(DType::kQ4_0, w.data(), 4, 64, Isa::kScalar).empty());
  EXPECT_EQ(pack_for_matmul(DType::kQ4_0, w.data(), 4, 64, Isa::kAvx2).empty(), !isa_supported(Isa::kAvx2));
  EXPECT_FALSE(packed_matmul_supports(DType::kF32, Isa::kAvx512));
}

// The idle-prefetch ranges (matmul.h): with no budget limit, the participants' ranges together
// are every weight byte of the batch once, in order, participant by participant, each share
// within one task of an equal split; a budget cuts each participant's to its first bytes; a
// batch of kPrefetchMaxTokens tokens or one thread gives none. Unpacked and packed weights.
TEST(PackedMatmul, PrefetchRangesAreTheParticipantsSharesOfTheWeights) {
  const DType t = DType::kQ4_0;
  const Shape shapes[] = {{576, 576}, {192, 576}, {192, 576}};  // a 135M model's Q, K, V
  std::vector<std::vector<uint8_t>> ws;
  std::vector<PackedWeights> packs;
  for (const Shape s : shapes) {
    const auto wf = random_floats(static_cast<size_t>(s.rows * s.cols), 7);
    const size_t rb = dtype_row_bytes(t, s.cols);
    ws.emplace_back(rb * static_cast<size_t>(s.rows));
    for (int64_t r = 0; r < s.rows; ++r) quantize_row(t, wf.data() + r * s.cols, ws.back().data() + static_cast<size_t>(r) * rb, s.cols);
    packs.push_back(pack_for_matmul(t, ws.back().data(), s.rows, s.cols, Isa::kAvx512));
  }
  for (bool packed : {false, true}) {
    if (packed && packs[0].empty()) continue;  // no AVX-512 here
    SCOPED_TRACE(packed ? "packed" : "file layout");
    std::vector<MatmulArgs> args;
    std::vector<std::pair<const uint8_t*, size_t>> whole;  // each weight's bytes as the kernel reads them
    for (size_t i = 0; i < 3; ++i) {
      args.push_back({.w_type = t, .w = ws[i].data(), .rows = shapes[i].rows, .cols = shapes[i].cols, .n = 1,
                      .w_packed = packed ? &packs[i] : nullptr});
      whole.emplace_back(packed ? packs[i].group(0) : ws[i].data(), packed ? packs[i].bytes() : ws[i].size());
    }
    size_t total = 0;
    for (const auto& w : whole) total += w.second;
    for (int threads : {2, 3, 4}) {
      std::vector<ThreadPool::PrefetchRange> all;
      std::vector<size_t> per;
      std::vector<const void*> first;  // each participant's first byte
      for (int p = 0; p < threads; ++p) {
        ThreadPool::PrefetchRange r[8];
        const size_t n = matmul_prefetch_ranges(args, threads, p, size_t{1} << 30, r);
        ASSERT_GT(n, 0u);
        first.push_back(r[0].p);
        size_t bytes = 0;
        for (size_t i = 0; i < n; ++i) {
          all.push_back(r[i]);
          bytes += r[i].bytes;
        }
        per.push_back(bytes);
      }
      // Concatenated, the ranges walk the three weights from start to end.
      size_t w = 0, off = 0;
      for (const ThreadPool::PrefetchRange& r : all) {
        const auto* p = static_cast<const uint8_t*>(r.p);
        if (off == whole[w].second) {
          ++w;
          off = 0;
        }
        ASSERT_LT(w, 3u);
        ASSERT_EQ(p, whole[w].first + off) << "threads " << threads;
        ASSERT_LE(off + r.bytes, whole[w].second);
        off += r.bytes;
      }
      EXPECT_EQ(w, 2u);
      EXPECT_EQ(off, whole[2].second);
      size_t sum = 0;
      for (size_t b : per) sum += b;
      EXPECT_EQ(sum, total);
      for (size_t b : per) EXPECT_NEAR(static_cast<double>(b), static_cast<double>(total) / threads, total / 8.0) << threads;
      // A budget: each participant's first bytes only.
      ThreadPool::PrefetchRange r[8];
      ASSERT_EQ(matmul_prefetch_ranges(args, threads, 0, 1000, r), 1u);
      EXPECT_EQ(r[0].p, whole[0].first);
      EXPECT_EQ(r[0].bytes, 1000u);
      const size_t n1 = matmul_prefetch_ranges(args, threads, threads - 1, 1000, r);
      size_t b1 = 0;
      for (size_t i = 0; i < n1; ++i) b1 += r[i].bytes;
      EXPECT_EQ(b1, 1000u);
      EXPECT_EQ(r[0].p, first.back());
    }
    ThreadPool::PrefetchRange r[8];
    EXPECT_EQ(matmul_prefetch_ranges(args, 1, 0, 1 << 20, r), 0u);
    for (MatmulArgs& a : args) a.n = kPrefetchMaxTokens;
    EXPECT_EQ(matmul_prefetch_ranges(args, 2, 0, 1 << 20, r), 0u);
  }
}

}  // namespace
}  // namespace tessera::kernels
