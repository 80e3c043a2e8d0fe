// Synthetic K/V with the statistics of real transformer K/V (used by tests and benchmarks):
// K has per-channel offsets and a few outlier channels (large magnitude, as RoPE'd keys show),
// rotated slowly along the token axis; V is closer to zero-mean Gaussian with per-head scales.
// Deterministic for a given seed.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tessera/kvstore/blob.h"

namespace tessera::kvstore::testing {

inline PackedKv synthetic_kv(DType dtype, KvShape shape, uint64_t fingerprint, uint32_t seed) {
  PackedKv kv;
  kv.fingerprint = fingerprint;
  kv.dtype = dtype;
  kv.shape = shape;
  const size_t eb = element_bytes(dtype);
  kv.k.resize(kv.region_bytes());
  kv.v.resize(kv.region_bytes());
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  const uint32_t hd = shape.head_dim;
  size_t idx = 0;
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    std::vector<float> k_off(size_t{shape.n_kv_heads} * hd), k_scale(k_off.size()), v_scale(shape.n_kv_heads);
    for (size_t c = 0; c < k_off.size(); ++c) {
      k_off[c] = 0.5f * normal(rng);
      k_scale[c] = uni(rng) < 0.05f ? 4.0f + 4.0f * uni(rng) : 0.5f + uni(rng);
    }
    for (auto& s : v_scale) s = 0.2f + 0.6f * uni(rng);
    for (uint32_t t = 0; t < shape.n_tokens; ++t) {
      for (uint32_t h = 0; h < shape.n_kv_heads; ++h) {
        for (uint32_t d = 0; d < hd; ++d, ++idx) {
          const size_t c = size_t{h} * hd + d;
          const float theta = static_cast<float>(t) / std::pow(100.0f, static_cast<float>(d / 2 * 2) / static_cast<float>(hd));
          const float k = k_off[c] + k_scale[c] * (0.7f * std::cos(theta + static_cast<float>(c)) + 0.3f * normal(rng));
          const float v = v_scale[h] * normal(rng);
          float_to_element(dtype, k, kv.k.data() + idx * eb);
          float_to_element(dtype, v, kv.v.data() + idx * eb);
        }
      }
    }
  }
  return kv;
}

}  // namespace tessera::kvstore::testing
