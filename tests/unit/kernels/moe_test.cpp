// Mixture-of-experts routing (kernels/moe.h) against a plain scalar reference: softmax in
// double, a stable sort for the top k, weights renormalized over the chosen or not; grouping by
// expert; the shared-expert gate against a true sigmoid.
#include "tessera/kernels/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace tessera::kernels {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<double> weights;
};

Routed reference_route(const float* l, int32_t n_experts, int32_t k, bool norm) {
  std::vector<double> p(static_cast<size_t>(n_experts));
  const double mx = *std::max_element(l, l + n_experts);
  double z = 0.0;
  for (int32_t e = 0; e < n_experts; ++e) z += (p[static_cast<size_t>(e)] = std::exp(static_cast<double>(l[e]) - mx));
  for (double& v : p) v /= z;
  std::vector<int32_t> ids(static_cast<size_t>(n_experts));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]; });
  ids.resize(static_cast<size_t>(k));
  Routed r{ids, {}};
  double s = 0.0;
  for (int32_t id : ids) s += p[static_cast<size_t>(id)];
  for (int32_t id : ids) r.weights.push_back(norm ? p[static_cast<size_t>(id)] / s : p[static_cast<size_t>(id)]);
  return r;
}

TEST(MoeRoute, TopKAndWeightsMatchTheReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  struct Case {
    int32_t experts, k;
  };
  for (const Case c : {Case{8, 2}, Case{16, 4}, Case{60, 4}, Case{64, 6}, Case{4, 4}, Case{1, 1}}) {
    for (const bool norm : {true, false}) {
      const int64_t n = 37, stride = c.experts + 3;  // strided logits rows
      std::vector<float> logits(static_cast<size_t>(n * stride), 1e9f);
      for (int64_t t = 0; t < n; ++t) {
        for (int32_t e = 0; e < c.experts; ++e) logits[static_cast<size_t>(t * stride + e)] = nd(rng);
      }
      std::vector<int32_t> ids(static_cast<size_t>(n * c.k));
      std::vector<float> w(ids.size());
      moe_route(logits.data(), stride, n, c.experts, c.k, norm, ids.data(), w.data());
      for (int64_t t = 0; t < n; ++t) {
        const Routed ref = reference_route(logits.data() + t * stride, c.experts, c.k, norm);
        double sum = 0.0;
        for (int32_t j = 0; j < c.k; ++j) {
          const size_t i = static_cast<size_t>(t * c.k + j);
          EXPECT_EQ(ids[i], ref.ids[static_cast<size_t>(j)]) << c.experts << " experts, token " << t << " choice " << j;
          EXPECT_NEAR(w[i], ref.weights[static_cast<size_t>(j)], 2e-7) << c.experts << " experts, token " << t;
          sum += w[i];
        }
        if (norm || c.k == c.experts) {  // softmax over the chosen k, or all chosen
          EXPECT_NEAR(sum, 1.0, 1e-6);
        }
      }
    }
  }
}

TEST(MoeRoute, TiesGoToTheLowerIndexAndLargeLogitsStayFinite) {
  const float logits[6] = {1.0f, 3.0f, 3.0f, -2.0f, 3.0f, 80.0f};
  int32_t ids[3];
  float w[3];
  moe_route(logits, 6, 1, 6, 3, false, ids, w);
  EXPECT_EQ(ids[0], 5);
  EXPECT_EQ(ids[1], 1);
  EXPECT_EQ(ids[2], 2);
  EXPECT_FLOAT_EQ(w[0], 1.0f);  // exp(80 - 80) / (1 + tiny)
  const float big[4] = {1000.0f, 999.0f, -1000.0f, 0.0f};
  moe_route(big, 4, 1, 4, 2, true, ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  EXPECT_NEAR(w[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(w[1], 1.0 - 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

// DeepSeek-V3 routing from its definition (Hugging Face DeepseekV3 MoEGate, noaux_tc), in
// double: sigmoid scores, biased choice values, groups scored by their two best, the best
// topk_group groups kept, the top k of the kept experts, unbiased weights (normalized or not).
Routed reference_sigmoid_route(const float* l, const float* bias, int32_t n_experts, int32_t k, int32_t n_group,
                               int32_t topk_group, bool norm) {
  std::vector<double> score(static_cast<size_t>(n_experts)), choice(score.size());
  for (size_t e = 0; e < score.size(); ++e) {
    score[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(l[e])));
    choice[e] = score[e] + (bias != nullptr ? bias[e] : 0.0);
  }
  const int32_t gsize = n_experts / n_group;
  std::vector<double> gscore(static_cast<size_t>(n_group));
  for (int32_t g = 0; g < n_group; ++g) {
    std::vector<double> v(choice.begin() + g * gsize, choice.begin() + (g + 1) * gsize);
    std::sort(v.rbegin(), v.rend());
    gscore[static_cast<size_t>(g)] = v[0] + (v.size() > 1 ? v[1] : 0.0);
  }
  std::vector<int32_t> groups(static_cast<size_t>(n_group));
  std::iota(groups.begin(), groups.end(), 0);
  std::stable_sort(groups.begin(), groups.end(), [&](int32_t a, int32_t b) { return gscore[static_cast<size_t>(a)] > gscore[static_cast<size_t>(b)]; });
  groups.resize(static_cast<size_t>(n_group > 1 ? topk_group : 1));
  std::vector<double> masked(choice.size(), -INFINITY);
  for (int32_t e = 0; e < n_experts; ++e) {
    if (n_group == 1 || std::find(groups.begin(), groups.end(), e / gsize) != groups.end()) masked[static_cast<size_t>(e)] = choice[static_cast<size_t>(e)];
  }
  std::vector<int32_t> ids(static_cast<size_t>(n_experts));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return masked[static_cast<size_t>(a)] > masked[static_cast<size_t>(b)]; });
  ids.resize(static_cast<size_t>(k));
  Routed r{ids, {}};
  double s = 0.0;
  for (int32_t id : ids) s += score[static_cast<size_t>(id)];
  for (int32_t id : ids) r.weights.push_back(norm ? score[static_cast<size_t>(id)] / s : score[static_cast<size_t>(id)]);
  return r;
}

TEST(MoeRoute, SigmoidGroupLimitedRoutingMatchesTheDefinition) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  struct Case {
    int32_t experts, k, n_group, topk_group;
    bool bias, norm;
  };
  // DeepSeek-V3: 256 experts, top 8, 8 groups, 4 kept, bias, normalized.
  for (const Case c : {Case{256, 8, 8, 4, true, true}, Case{16, 4, 4, 2, true, true}, Case{16, 4, 4, 2, false, false},
                       Case{8, 2, 1, 1, true, true}, Case{64, 6, 8, 3, true, false}, Case{8, 8, 4, 4, true, true}}) {
    const int64_t n = 29, stride = c.experts + 1;
    std::vector<float> logits(static_cast<size_t>(n * stride), 1e9f), bias(static_cast<size_t>(c.experts));
    for (float& b : bias) b = 0.3f * nd(rng);  // large enough to change choices
    for (int64_t t = 0; t < n; ++t) {
      for (int32_t e = 0; e < c.experts; ++e) logits[static_cast<size_t>(t * stride + e)] = nd(rng);
    }
    std::vector<int32_t> ids(static_cast<size_t>(n * c.k));
    std::vector<float> w(ids.size());
    const MoeSigmoidRouting r{.bias = c.bias ? bias.data() : nullptr, .n_group = c.n_group, .topk_group = c.topk_group,
                              .norm_weights = c.norm};
    moe_route_sigmoid(logits.data(), stride, n, c.experts, c.k, r, ids.data(), w.data());
    int32_t differs_from_ungrouped = 0;
    for (int64_t t = 0; t < n; ++t) {
      const float* l = logits.data() + t * stride;
      const Routed ref = reference_sigmoid_route(l, r.bias, c.experts, c.k, c.n_group, c.topk_group, c.norm);
      const Routed flat = reference_sigmoid_route(l, r.bias, c.experts, c.k, 1, 1, c.norm);
      differs_from_ungrouped += ref.ids != flat.ids ? 1 : 0;
      for (int32_t j = 0; j < c.k; ++j) {
        const size_t i = static_cast<size_t>(t * c.k + j);
        EXPECT_EQ(ids[i], ref.ids[static_cast<size_t>(j)]) << c.experts << " experts, token " << t << " choice " << j;
        EXPECT_NEAR(w[i], ref.weights[static_cast<size_t>(j)], 1e-6) << c.experts << " experts, token " << t;
      }
    }
    if (c.n_group > 1 && c.topk_group * (c.experts / c.n_group) > c.k) {
      EXPECT_GT(differs_from_ungrouped, 0) << "the group limit never mattered: " << c.experts << " experts";
    }
  }
}

TEST(MoeRoute, SigmoidWeightsAreUnbiasedScores) {
  const float logits[4] = {0.0f, 1.0f, 2.0f, -1.0f};
  const float bias[4] = {0.0f, 0.0f, 0.0f, 5.0f};  // selects expert 3 first, weight still sigmoid(-1)
  int32_t ids[2];
  float w[2];
  moe_route_sigmoid(logits, 4, 1, 4, 2, {.bias = bias, .norm_weights = false}, ids, w);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 2);
  EXPECT_FLOAT_EQ(w[0], 1.0f / (1.0f + std::exp(1.0f)));
  EXPECT_FLOAT_EQ(w[1], 1.0f / (1.0f + std::exp(-2.0f)));
}

TEST(MoeGroup, ListsEveryPairOnceExpertByExpertInOrder) {
  std::mt19937 rng(3);
  const int32_t experts = 10, k = 3;
  const int64_t n = 29;
  std::vector<int32_t> ids(static_cast<size_t>(n * k));
  for (int64_t t = 0; t < n; ++t) {  // k distinct experts per token, some experts unused
    std::vector<int32_t> all = {0, 1, 2, 4, 5, 7, 9};
    std::shuffle(all.begin(), all.end(), rng);
    for (int32_t j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = all[static_cast<size_t>(j)];
  }
  std::vector<int32_t> offsets(experts + 1), order(ids.size());
  moe_group(ids.data(), n, k, experts, offsets.data(), order.data());
  EXPECT_EQ(offsets[0], 0);
  EXPECT_EQ(offsets[experts], n * k);
  std::vector<int> seen(ids.size(), 0);
  for (int32_t e = 0; e < experts; ++e) {
    int64_t want = std::count(ids.begin(), ids.end(), e);
    EXPECT_EQ(offsets[e + 1] - offsets[e], want) << "expert " << e;
    for (int32_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      EXPECT_EQ(ids[static_cast<size_t>(order[static_cast<size_t>(r)])], e);
      if (r > offsets[e]) {
        EXPECT_LT(order[static_cast<size_t>(r - 1)], order[static_cast<size_t>(r)]);
      }
      ++seen[static_cast<size_t>(order[static_cast<size_t>(r)])];
    }
  }
  for (int s : seen) EXPECT_EQ(s, 1);
  EXPECT_EQ(offsets[3], offsets[4]);  // expert 3 unused: an empty range
}

TEST(MoeSharedGate, IsTheSigmoid) {
  for (float x : {-30.0f, -5.5f, -1.0f, -1e-3f, 0.0f, 1e-3f, 0.25f, 2.0f, 7.0f, 30.0f}) {
    EXPECT_NEAR(moe_shared_gate(x), 1.0 / (1.0 + std::exp(-static_cast<double>(x))), 2e-7) << x;
  }
}

}  // namespace
}  // namespace tessera::kernels
