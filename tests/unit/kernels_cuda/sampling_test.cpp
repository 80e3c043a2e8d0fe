// Device sampling: greedy equals the host argmax (lowest id on ties); top-k, min-p and top-p
// keep exactly the documented survivors; the draw walks survivors in id order.
#include <algorithm>

#include "cuda_test_util.h"
#include "tessera/kernels/cuda/sampling.h"

namespace tessera::kernels::cuda {
namespace {

using namespace testing;

struct Rows {
  std::vector<float> logits, temperature, top_p, min_p, uniform;
  std::vector<int32_t> top_k;
  int32_t vocab = 0;

  void add(const std::vector<float>& row, float temp, int32_t k, float p, float mp, float u) {
    vocab = static_cast<int32_t>(row.size());
    logits.insert(logits.end(), row.begin(), row.end());
    temperature.push_back(temp);
    top_k.push_back(k);
    top_p.push_back(p);
    min_p.push_back(mp);
    uniform.push_back(u);
  }

  std::vector<int32_t> sample() const {
    const auto n = static_cast<int32_t>(temperature.size());
    DeviceArray<float> dl(logits), dt(temperature), dp(top_p), dm(min_p), du(uniform);
    DeviceArray<int32_t> dk(top_k), out(static_cast<size_t>(n));
    EXPECT_EQ(sample_tokens({.logits = dl.get(), .stride = vocab, .vocab = vocab, .n_rows = n, .temperature = dt.get(),
                             .top_k = dk.get(), .top_p = dp.get(), .min_p = dm.get(), .uniform = du.get(),
                             .out_tokens = out.get()},
                            nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return out.to_host();
  }
};

TEST(CudaSampling, GreedyIsTheArgmaxWithLowestIdOnTies) {
  TS_REQUIRE_GPU();
  for (int32_t vocab : {1, 7, 1000, 32000, 151936}) {
    auto row = random_floats(static_cast<size_t>(vocab), static_cast<uint64_t>(vocab));
    const auto best = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    Rows r;
    r.add(row, 0.0f, 0, 1.0f, 0.0f, 0.5f);
    r.add(row, 0.7f, 1, 1.0f, 0.0f, 0.5f);  // top_k == 1 is greedy too
    if (vocab > 3) {
      std::vector<float> tie = row;
      tie[static_cast<size_t>(vocab - 1)] = tie[2] = 5.0f;  // tie between ids 2 and vocab-1
      r.add(tie, 0.0f, 0, 1.0f, 0.0f, 0.5f);
    }
    const auto got = r.sample();
    EXPECT_EQ(got[0], best) << "vocab " << vocab;
    EXPECT_EQ(got[1], best) << "vocab " << vocab;
    if (vocab > 3) {
      EXPECT_EQ(got[2], 2) << "vocab " << vocab;
    }
    DeviceArray<float> dl(row);
    DeviceArray<int32_t> out(1);
    TS_CUDA_OK(argmax_rows(dl.get(), vocab, vocab, 1, out.get(), nullptr));
    EXPECT_EQ(out.to_host()[0], best);
  }
}

// Probabilities 0.4, 0.3, 0.2, 0.1 on ids 3, 0, 5, 1 of an 8-id vocabulary (others ~0).
std::vector<float> designed() {
  std::vector<float> row(8, -1e4f);
  row[3] = std::log(0.4f);
  row[0] = std::log(0.3f);
  row[5] = std::log(0.2f);
  row[1] = std::log(0.1f);
  return row;
}

TEST(CudaSampling, TruncationKeepsExactlyTheSurvivors) {
  TS_REQUIRE_GPU();
  Rows r;
  // top_p 0.5: most-likely-first prefix {3 (0.4), 0 (0.3)} reaches 0.7 >= 0.5. In id order the
  // survivors are 0 then 3: u below 0.3/0.7 picks 0, above picks 3.
  r.add(designed(), 1.0f, 0, 0.5f, 0.0f, 0.0f);
  r.add(designed(), 1.0f, 0, 0.5f, 0.0f, 0.42f);
  r.add(designed(), 1.0f, 0, 0.5f, 0.0f, 0.44f);
  r.add(designed(), 1.0f, 0, 0.5f, 0.0f, 0.999f);
  // top_k 3 keeps {3, 0, 5}: masses 0.3, 0.4, 0.2 in id order 0, 3, 5 (total 0.9).
  r.add(designed(), 1.0f, 3, 1.0f, 0.0f, 0.999f);
  r.add(designed(), 1.0f, 3, 1.0f, 0.0f, 0.0f);
  // min_p 0.6: keep p >= 0.24 -> {3, 0}.
  r.add(designed(), 1.0f, 0, 1.0f, 0.6f, 0.999f);
  // No truncation: u near 1 reaches the last id with mass (id 5 before the ~0 tail? the tail
  // has exp(-1e4) == 0 in f32, so the last survivor with mass is id 5).
  r.add(designed(), 1.0f, 0, 1.0f, 0.0f, 0.9999f);
  const auto got = r.sample();
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[1], 0);  // 0.42 < 0.3 / 0.7 = 0.4286
  EXPECT_EQ(got[2], 3);
  EXPECT_EQ(got[3], 3);
  EXPECT_EQ(got[4], 5);
  EXPECT_EQ(got[5], 0);
  EXPECT_EQ(got[6], 3);
  EXPECT_EQ(got[7], 5);
}

TEST(CudaSampling, DrawFollowsTheDistribution) {
  TS_REQUIRE_GPU();
  // 1000 evenly spaced uniforms over top_k 2 of the designed row: ids 0 (0.3/0.7) and 3.
  Rows r;
  for (int i = 0; i < 1000; ++i) r.add(designed(), 1.0f, 2, 1.0f, 0.0f, (static_cast<float>(i) + 0.5f) / 1000.0f);
  const auto got = r.sample();
  const auto zeros = std::count(got.begin(), got.end(), 0), threes = std::count(got.begin(), got.end(), 3);
  EXPECT_EQ(zeros + threes, 1000);
  EXPECT_NEAR(static_cast<double>(zeros), 1000.0 * 0.3 / 0.7, 1.5);
}

}  // namespace
}  // namespace tessera::kernels::cuda
