// H2O's heavy-hitter statistic (docs/kv.md "H2O"): the attention probabilities each query row of
// one sequence gives every cache index it attends, summed over query heads, added to `mass`.
// The same scores as paged_attention (scale, soft-cap, sliding window), recomputed here so the
// attention kernels stay untouched; run only for sequences with an H2O policy.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine_impl.h"

namespace tessera::worker {

void accumulate_key_mass(const KeyMassArgs& a) {
  const int32_t group = a.n_heads / a.n_kv_heads;
  const int64_t tf = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;
  std::vector<float> scores;
  std::vector<float> key(static_cast<size_t>(tf));
  for (int32_t r = 0; r < a.n_rows; ++r) {
    const int32_t pos = a.start_pos + r;
    const int32_t lo = a.window > 0 ? std::max(0, pos - a.window + 1) : 0;
    const auto n = static_cast<size_t>(pos - lo + 1);
    for (int32_t h = 0; h < a.n_heads; ++h) {
      const float* q = a.q + static_cast<int64_t>(r) * a.q_stride + static_cast<int64_t>(h) * a.head_dim;
      const int64_t off = static_cast<int64_t>(h / group) * a.head_dim;
      scores.assign(n, 0.0f);
      float mx = -INFINITY;
      for (int32_t p = lo; p <= pos; ++p) {
        const int64_t slot = static_cast<int64_t>(a.pages[p / a.page_size]) * a.page_size + p % a.page_size;
        const float* k = a.pool->key(a.layer, slot) + off;
        float sc = 0.0f;
        for (int32_t d = 0; d < a.head_dim; ++d) sc += q[d] * k[d];
        sc *= a.scale;
        if (a.softcap > 0.0f) sc = a.softcap * std::tanh(sc / a.softcap);
        scores[static_cast<size_t>(p - lo)] = sc;
        mx = std::max(mx, sc);
      }
      float sum = 0.0f;
      for (float& sc : scores) sum += (sc = std::exp(sc - mx));
      const float inv = 1.0f / sum;
      for (size_t i = 0; i < n; ++i) a.mass[static_cast<size_t>(lo) + i] += scores[i] * inv;
    }
  }
}

}  // namespace tessera::worker
