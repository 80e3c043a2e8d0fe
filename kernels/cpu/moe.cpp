#include "tessera/kernels/moe.h"

#include <cmath>

#include "tessera/common/check.h"

namespace tessera::kernels {

void moe_route(const float* logits, int64_t logits_stride, int64_t n, int32_t n_experts, int32_t k, bool norm_weights,
               int32_t* ids, float* weights) {
  TS_CHECK(n_experts >= 1 && k >= 1 && k <= n_experts) << "moe_route: " << k << " of " << n_experts << " experts";
  constexpr int32_t kMaxExperts = 4096;
  TS_CHECK_LE(n_experts, kMaxExperts);
  float probs[kMaxExperts];
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits + t * logits_stride;
    float mx = -INFINITY;
    for (int32_t e = 0; e < n_experts; ++e) mx = std::fmax(mx, l[e]);
    double sum = 0.0;
    for (int32_t e = 0; e < n_experts; ++e) {
      probs[e] = std::exp(l[e] - mx);
      sum += static_cast<double>(probs[e]);
    }
    const auto inv = static_cast<float>(1.0 / sum);
    for (int32_t e = 0; e < n_experts; ++e) probs[e] *= inv;
    int32_t* id = ids + t * k;
    float* w = weights + t * k;
    // Selection by insertion into the k best (k is small: 2 to 8).
    int32_t filled = 0;
    for (int32_t e = 0; e < n_experts; ++e) {
      if (filled == k && !(probs[e] > probs[id[k - 1]])) continue;
      int32_t j = filled < k ? filled++ : k - 1;
      while (j > 0 && probs[e] > probs[id[j - 1]]) {
        id[j] = id[j - 1];
        --j;
      }
      id[j] = e;
    }
    double wsum = 0.0;
    for (int32_t j = 0; j < k; ++j) {
      w[j] = probs[id[j]];
      wsum += static_cast<double>(w[j]);
    }
    if (norm_weights) {
      const auto s = static_cast<float>(wsum);
      for (int32_t j = 0; j < k; ++j) w[j] /= s;
    }
  }
}

void moe_route_sigmoid(const float* logits, int64_t logits_stride, int64_t n, int32_t n_experts, int32_t k,
                       const MoeSigmoidRouting& r, int32_t* ids, float* weights) {
  constexpr int32_t kMaxExperts = 4096;
  TS_CHECK(n_experts >= 1 && n_experts <= kMaxExperts && k >= 1 && k <= n_experts) << "moe_route_sigmoid: " << k << " of " << n_experts;
  TS_CHECK(r.n_group >= 1 && n_experts % r.n_group == 0 && r.topk_group >= 1 && r.topk_group <= r.n_group)
      << "moe_route_sigmoid: " << r.topk_group << " of " << r.n_group << " groups of " << n_experts << " experts";
  const int32_t gsize = n_experts / r.n_group;
  TS_CHECK(r.n_group == 1 || (gsize >= 2 && k <= r.topk_group * gsize)) << "moe_route_sigmoid: groups of " << gsize;
  float scores[kMaxExperts], choice[kMaxExperts];
  bool kept[kMaxExperts];
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits + t * logits_stride;
    for (int32_t e = 0; e < n_experts; ++e) {
      scores[e] = 1.0f / (1.0f + std::exp(-l[e]));
      choice[e] = r.bias != nullptr ? scores[e] + r.bias[e] : scores[e];
      kept[e] = true;
    }
    if (r.n_group > 1) {
      float gscore[kMaxExperts];
      bool gkept[kMaxExperts];
      for (int32_t g = 0; g < r.n_group; ++g) {
        float a = -INFINITY, b = -INFINITY;  // the two highest of the group
        for (int32_t e = g * gsize; e < (g + 1) * gsize; ++e) {
          if (choice[e] > a) {
            b = a;
            a = choice[e];
          } else if (choice[e] > b) {
            b = choice[e];
          }
        }
        gscore[g] = a + b;
        gkept[g] = false;
      }
      for (int32_t i = 0; i < r.topk_group; ++i) {
        int32_t best = -1;
        for (int32_t g = 0; g < r.n_group; ++g) {
          if (!gkept[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
        }
        gkept[best] = true;
      }
      for (int32_t e = 0; e < n_experts; ++e) kept[e] = gkept[e / gsize];
    }
    int32_t* id = ids + t * k;
    float* w = weights + t * k;
    int32_t filled = 0;
    for (int32_t e = 0; e < n_experts; ++e) {
      if (!kept[e] || (filled == k && !(choice[e] > choice[id[k - 1]]))) continue;
      int32_t j = filled < k ? filled++ : k - 1;
      while (j > 0 && choice[e] > choice[id[j - 1]]) {
        id[j] = id[j - 1];
        --j;
      }
      id[j] = e;
    }
    double wsum = 0.0;
    for (int32_t j = 0; j < k; ++j) {
      w[j] = scores[id[j]];
      wsum += static_cast<double>(w[j]);
    }
    if (r.norm_weights) {
      const auto s = static_cast<float>(wsum);
      for (int32_t j = 0; j < k; ++j) w[j] /= s;
    }
  }
}

void moe_group(const int32_t* ids, int64_t n, int32_t k, int32_t n_experts, int32_t* offsets, int32_t* order) {
  for (int32_t e = 0; e <= n_experts; ++e) offsets[e] = 0;
  const int64_t pairs = n * k;
  for (int64_t p = 0; p < pairs; ++p) {
    TS_CHECK(ids[p] >= 0 && ids[p] < n_experts) << "moe_group: expert id " << ids[p];
    ++offsets[ids[p] + 1];
  }
  for (int32_t e = 0; e < n_experts; ++e) offsets[e + 1] += offsets[e];
  // Fill with running cursors (offsets[e] is restored after the pass).
  for (int64_t p = 0; p < pairs; ++p) order[offsets[ids[p]]++] = static_cast<int32_t>(p);
  for (int32_t e = n_experts; e > 0; --e) offsets[e] = offsets[e - 1];
  offsets[0] = 0;
}

float moe_shared_gate(float x) {
  if (x == 0.0f) return 0.5f;
  const float silu = x / (1.0f + std::exp(-x));
  return silu / x;
}

}  // namespace tessera::kernels
