// The ggml weight formats against values recorded from ggml itself (fixtures/ggml_quants):
// dequantize (common) and the kernels' dequantize_row bit-exact on quantized and on random blocks, quantize_row bit-exact against
// ggml's reference quantizers, and quantize_row_q8_K's round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tessera/kernels/ops.h"
#include "tessera/common/quants.h"

namespace tessera::kernels {
namespace {

struct Fixture {
  std::vector<float> x, deq_quant, deq_random;
  std::vector<uint8_t> quant, random;
};

Fixture load_fixture(DType t) {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  const std::string path = std::string(src != nullptr ? src : ".") + "/tests/unit/kernels/fixtures/ggml_quants/" +
                           dtype_name(t) + ".bin";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  char magic[4];
  uint32_t n = 0, nbytes = 0;
  in.read(magic, 4);
  in.read(reinterpret_cast<char*>(&n), 4);
  in.read(reinterpret_cast<char*>(&nbytes), 4);
  EXPECT_EQ(std::string(magic, 4), "TQF1");
  EXPECT_EQ(nbytes, dtype_row_bytes(t, n));
  Fixture f;
  auto read_f = [&](std::vector<float>& v) {
    v.resize(n);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
  };
  auto read_b = [&](std::vector<uint8_t>& v) {
    v.resize(nbytes);
    in.read(reinterpret_cast<char*>(v.data()), nbytes);
  };
  read_f(f.x);
  read_b(f.quant);
  read_f(f.deq_quant);
  read_b(f.random);
  read_f(f.deq_random);
  EXPECT_TRUE(in.good()) << path << " is truncated";
  return f;
}

const DType kQuantTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K,
                             DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

// Bitwise float equality (so -0.0 vs 0.0 or a NaN would show).
void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if (a != b) {
      ADD_FAILURE() << what << " element " << i << ": " << got[i] << " vs ggml " << want[i];
      ++bad;
    }
  }
}

class QuantFormat : public ::testing::TestWithParam<DType> {};

TEST_P(QuantFormat, DequantizeMatchesGgmlBitExact) {
  const DType t = GetParam();
  const Fixture f = load_fixture(t);
  const auto n = static_cast<int64_t>(f.x.size());
  std::vector<float> out(f.x.size());
  dequantize_row(t, f.quant.data(), out.data(), n);
  expect_bits_equal(out, f.deq_quant, std::string(dtype_name(t)) + " quantized blocks");
  tessera::dequantize(t, f.quant.data(), out.data(), n);
  expect_bits_equal(out, f.deq_quant, std::string(dtype_name(t)) + " quantized blocks (common)");
  dequantize_row(t, f.random.data(), out.data(), n);
  expect_bits_equal(out, f.deq_random, std::string(dtype_name(t)) + " random blocks");
}

TEST_P(QuantFormat, QuantizeMatchesGgmlReferenceBitExact) {
  const DType t = GetParam();
  const Fixture f = load_fixture(t);
  std::vector<uint8_t> q(f.quant.size(), 0xAB);
  quantize_row(t, f.x.data(), q.data(), static_cast<int64_t>(f.x.size()));
  const size_t bb = dtype_block_bytes(t);
  int bad = 0;
  for (size_t i = 0; i < q.size() && bad < 5; ++i) {
    if (q[i] != f.quant[i]) {
      ADD_FAILURE() << dtype_name(t) << " byte " << i << " (block " << i / bb << ", offset " << i % bb
                    << "): " << int{q[i]} << " vs ggml " << int{f.quant[i]};
      ++bad;
    }
  }
}

TEST_P(QuantFormat, RowBytesAndRoundTripError) {
  const DType t = GetParam();
  const Fixture f = load_fixture(t);
  EXPECT_EQ(dtype_row_bytes(t, static_cast<int64_t>(f.x.size())), f.quant.size());
  EXPECT_TRUE(dtype_is_quantized(t));
  // The gaussian row (first 256) comes back within the format's resolution.
  std::vector<float> back(f.x.size());
  dequantize_row(t, f.quant.data(), back.data(), static_cast<int64_t>(f.x.size()));
  double num = 0, den = 0;
  for (size_t i = 0; i < 256; ++i) {
    num += (back[i] - f.x[i]) * (back[i] - f.x[i]);
    den += f.x[i] * f.x[i];
  }
  // Q2_K (2.6 bits) is the coarsest: NMSE ~0.12 on a gaussian; the 4- to 8-bit formats < 0.02.
  EXPECT_LT(num / den, t == DType::kQ2_K ? 0.15 : t == DType::kQ3_K ? 0.06 : 0.02) << dtype_name(t);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantFormat, ::testing::ValuesIn(kQuantTypes),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

TEST(QuantizeQ8K, BlockSumsAndScale) {
  std::vector<float> x(512);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * (i < 256 ? 1.0f : 0.0f);
  std::vector<BlockQ8_K> q(2);
  quantize_row_q8_K(x.data(), q.data(), 512);
  int maxabs = 0;
  for (int g = 0; g < 16; ++g) {
    int s = 0;
    for (int i = 0; i < 16; ++i) s += q[0].qs[g * 16 + i];
    EXPECT_EQ(s, q[0].bsums[g]);
  }
  for (int i = 0; i < 256; ++i) {
    maxabs = std::max(maxabs, std::abs(int{q[0].qs[i]}));
    EXPECT_NEAR(q[0].qs[i] * q[0].d, x[static_cast<size_t>(i)], std::fabs(q[0].d) * 0.5f + 1e-7f);
  }
  EXPECT_EQ(maxabs, 127);
  EXPECT_EQ(q[1].d, 0.0f);  // an all-zero block
}

}  // namespace
}  // namespace tessera::kernels
