// Error of dequantized K/V as attention sees it: softmax(q·K/sqrt(d))·V for random queries
// (4 per layer and KV head), exact K/V vs decoded K/V; returns ||o - o'|| / ||o|| over all.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tessera/kvstore/blob.h"

namespace tessera::kvstore::testing {

inline double attention_output_rel_error(const PackedKv& a, const PackedKv& b, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const KvShape& s = a.shape;
  const size_t eb = element_bytes(a.dtype);
  double err2 = 0, ref2 = 0;
  std::vector<double> q(s.head_dim), wa(s.n_tokens), wb(s.n_tokens);
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      for (int qi = 0; qi < 4; ++qi) {
        for (auto& x : q) x = normal(rng);
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
  }
  return std::sqrt(err2 / ref2);
}

// The same with the model's own queries: queries [n_layers][n_queries][n_heads * head_dim]
// (after RoPE; query head h reads kv head h / (n_heads / n_kv_heads)), each attending over all
// tokens of the K/V with scale 1/sqrt(head_dim); ||o - o'|| / ||o|| over all.
inline double attention_output_rel_error_real(const PackedKv& a, const PackedKv& b, const std::vector<float>& queries,
                                              uint32_t n_queries, uint32_t n_heads) {
  const KvShape& s = a.shape;
  const size_t eb = element_bytes(a.dtype);
  const uint32_t group = n_heads / s.n_kv_heads;
  double err2 = 0, ref2 = 0;
  std::vector<double> wa(s.n_tokens), wb(s.n_tokens);
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    for (uint32_t qi = 0; qi < n_queries; ++qi) {
      for (uint32_t hq = 0; hq < n_heads; ++hq) {
        const float* q = queries.data() + (size_t{l} * n_queries + qi) * n_heads * s.head_dim + size_t{hq} * s.head_dim;
        const uint32_t h = hq / group;
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
  }
  return std::sqrt(err2 / ref2);
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
