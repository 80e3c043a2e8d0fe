// Error of dequantized K/V as attention sees it: softmax(q·K/sqrt(d))·V, exact K/V vs decoded
// K/V; ||o - o'|| / ||o|| over every query of every layer:
//   attention_output_rel_error       random queries (4 per layer and KV head)
//   attention_output_rel_error_real  the model's own queries
//   attention_output_rel_error_full  the model's continuations, attending causally over the
//                                    blob and their own exact positions
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tessera/kvstore/blob.h"

namespace tessera::kvstore::testing {

// The probe both share. `query(l, j, kv_head)` returns query j (of `queries_per_layer`) of
// layer l, a pointer to head_dim values (float or double), and sets the KV head it reads.
template <class Query>
double attention_probe(const PackedKv& a, const PackedKv& b, uint32_t queries_per_layer, Query&& query) {
  const KvShape& s = a.shape;
  const size_t eb = element_bytes(a.dtype);
  double err2 = 0, ref2 = 0;
  std::vector<double> wa(s.n_tokens), wb(s.n_tokens);
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    for (uint32_t j = 0; j < queries_per_layer; ++j) {
      uint32_t h = 0;
      const auto* q = query(l, j, h);
      auto weights = [&](const PackedKv& kv, std::vector<double>& w) {
        double mx = -1e300;
        for (uint32_t t = 0; t < s.n_tokens; ++t) {
          const uint8_t* k = kv.k.data() + kv.row_offset(l, t) + size_t{h} * s.head_dim * eb;
          double dot = 0;
          for (uint32_t d = 0; d < s.head_dim; ++d) dot += q[d] * element_to_float(kv.dtype, k + d * eb);
          w[t] = dot / std::sqrt(static_cast<double>(s.head_dim));
          mx = std::max(mx, w[t]);
        }
        double sum = 0;
        for (auto& x : w) sum += (x = std::exp(x - mx));
        for (auto& x : w) x /= sum;
      };
      weights(a, wa);
      weights(b, wb);
      for (uint32_t d = 0; d < s.head_dim; ++d) {
        double oa = 0, ob = 0;
        for (uint32_t t = 0; t < s.n_tokens; ++t) {
          const size_t off = a.row_offset(l, t) + (size_t{h} * s.head_dim + d) * eb;
          oa += wa[t] * element_to_float(a.dtype, a.v.data() + off);
          ob += wb[t] * element_to_float(b.dtype, b.v.data() + off);
        }
        err2 += (oa - ob) * (oa - ob);
        ref2 += oa * oa;
      }
    }
  }
  return std::sqrt(err2 / ref2);
}

// Random N(0, 1) queries, 4 per layer and KV head, drawn from `seed`.
inline double attention_output_rel_error(const PackedKv& a, const PackedKv& b, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<double> q(a.shape.head_dim);
  return attention_probe(a, b, a.shape.n_kv_heads * 4, [&](uint32_t, uint32_t j, uint32_t& h) {
    h = j / 4;
    for (auto& x : q) x = normal(rng);
    return q.data();
  });
}

// The model's own queries: queries [n_layers][n_queries][n_heads * head_dim] (after RoPE; query
// head h reads kv head h / (n_heads / n_kv_heads)), each attending over all tokens of the K/V
// with scale 1/sqrt(head_dim).
inline double attention_output_rel_error_real(const PackedKv& a, const PackedKv& b, const std::vector<float>& queries,
                                              uint32_t n_queries, uint32_t n_heads) {
  const KvShape& s = a.shape;
  const uint32_t group = n_heads / s.n_kv_heads;
  return attention_probe(a, b, n_queries * n_heads, [&](uint32_t l, uint32_t j, uint32_t& h) {
    const uint32_t qi = j / n_heads, hq = j % n_heads;
    h = hq / group;
    return queries.data() + (size_t{l} * n_queries + qi) * n_heads * s.head_dim + size_t{hq} * s.head_dim;
  });
}

// One continuation after the blob's positions, as the model computed it: its queries
// [n_layers][n][n_heads * head_dim] (after RoPE) and its own K and V [n_layers][n][n_kv_heads *
// head_dim] (f32, exact).
struct Continuation {
  uint32_t n = 0;
  std::vector<float> q, k, v;
};

// The attention the model itself computes for the continuations: query i attends causally over
// the blob's positions (a: exact, b: decoded) and the continuation's own positions 0..i (exact
// in both); ||o - o'|| / ||o|| over every layer, query head and position.
inline double attention_output_rel_error_full(const PackedKv& a, const PackedKv& b, const std::vector<Continuation>& conts,
                                              uint32_t n_heads) {
  const KvShape& s = a.shape;
  const size_t eb = element_bytes(a.dtype);
  const uint32_t group = n_heads / s.n_kv_heads, hd = s.head_dim, row = s.n_kv_heads * hd;
  double err2 = 0, ref2 = 0;
  for (const Continuation& c : conts) {
    std::vector<double> wa(s.n_tokens + c.n), wb(s.n_tokens + c.n);
    for (uint32_t l = 0; l < s.n_layers; ++l) {
      for (uint32_t i = 0; i < c.n; ++i) {
        for (uint32_t hq = 0; hq < n_heads; ++hq) {
          const float* q = c.q.data() + (size_t{l} * c.n + i) * n_heads * hd + size_t{hq} * hd;
          const uint32_t h = hq / group, total = s.n_tokens + i + 1;
          auto key = [&](const PackedKv& kv, uint32_t t, uint32_t d) {
            return t < s.n_tokens ? static_cast<double>(element_to_float(kv.dtype, kv.k.data() + kv.row_offset(l, t) + (size_t{h} * hd + d) * eb))
                                  : c.k[(size_t{l} * c.n + (t - s.n_tokens)) * row + size_t{h} * hd + d];
          };
          auto value = [&](const PackedKv& kv, uint32_t t, uint32_t d) {
            return t < s.n_tokens ? static_cast<double>(element_to_float(kv.dtype, kv.v.data() + kv.row_offset(l, t) + (size_t{h} * hd + d) * eb))
                                  : c.v[(size_t{l} * c.n + (t - s.n_tokens)) * row + size_t{h} * hd + d];
          };
          auto weights = [&](const PackedKv& kv, std::vector<double>& w) {
            double mx = -1e300;
            for (uint32_t t = 0; t < total; ++t) {
              double dot = 0;
              for (uint32_t d = 0; d < hd; ++d) dot += q[d] * key(kv, t, d);
              w[t] = dot / std::sqrt(static_cast<double>(hd));
              mx = std::max(mx, w[t]);
            }
            double sum = 0;
            for (uint32_t t = 0; t < total; ++t) sum += (w[t] = std::exp(w[t] - mx));
            for (uint32_t t = 0; t < total; ++t) w[t] /= sum;
          };
          weights(a, wa);
          weights(b, wb);
          for (uint32_t d = 0; d < hd; ++d) {
            double oa = 0, ob = 0;
            for (uint32_t t = 0; t < total; ++t) {
              oa += wa[t] * value(a, t, d);
              ob += wb[t] * value(b, t, d);
            }
            err2 += (oa - ob) * (oa - ob);
            ref2 += oa * oa;
          }
        }
      }
    }
  }
  return std::sqrt(err2 / ref2);
}

}  // namespace tessera::kvstore::testing
