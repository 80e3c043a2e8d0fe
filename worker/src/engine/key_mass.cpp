// H2O's heavy-hitter statistic (docs/kv.md "H2O"): the attention probabilities each query row of
// one sequence gives every cache index it attends, summed over query heads, added to `mass`.
// The same scores as paged_attention (scale, soft-cap, sliding window), recomputed here so the
// attention kernels stay untouched; run only for sequences with an H2O policy.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine_impl.h"

namespace tessera::worker {

void accumulate_key_mass(const KeyMassArgs& a) {
  const int32_t group = a.n_heads / a.n_kv_heads;
  const int64_t tf = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;
  std::vector<float> key(static_cast<size_t>(tf));
  // One slot's K (every kv head) as f32, decoded from the pool's page dtype (f32, f16, int8).
  auto load_key = [&](int64_t slot) { a.pool->load(a.layer, slot, 0, key.data()); };
  std::vector<float> scores;  // [n_heads][keys of the row]
  for (int32_t r = 0; r < a.n_rows; ++r) {
    const int32_t pos = a.start_pos + r;
    const int32_t lo = a.window > 0 ? std::max(0, pos - a.window + 1) : 0;
    const auto n = static_cast<size_t>(pos - lo + 1);
    scores.assign(n * static_cast<size_t>(a.n_heads), 0.0f);
    for (int32_t p = lo; p <= pos; ++p) {
      load_key(static_cast<int64_t>(a.pages[p / a.page_size]) * a.page_size + p % a.page_size);
      for (int32_t h = 0; h < a.n_heads; ++h) {
        const float* q = a.q + static_cast<int64_t>(r) * a.q_stride + static_cast<int64_t>(h) * a.head_dim;
        const float* k = key.data() + static_cast<int64_t>(h / group) * a.head_dim;
        float sc = 0.0f;
        for (int32_t d = 0; d < a.head_dim; ++d) sc += q[d] * k[d];
        sc *= a.scale;
        if (a.softcap > 0.0f) sc = a.softcap * std::tanh(sc / a.softcap);
        scores[static_cast<size_t>(h) * n + static_cast<size_t>(p - lo)] = sc;
      }
    }
    for (int32_t h = 0; h < a.n_heads; ++h) {
      float* sh = scores.data() + static_cast<size_t>(h) * n;
      const float mx = *std::max_element(sh, sh + n);
      float sum = 0.0f;
      for (size_t i = 0; i < n; ++i) sum += (sh[i] = std::exp(sh[i] - mx));
      const float inv = 1.0f / sum;
      for (size_t i = 0; i < n; ++i) a.mass[static_cast<size_t>(lo) + i] += sh[i] * inv;
    }
  }
}

}  // namespace tessera::worker
