// CacheBlend's layer loop (tessera/worker/blend.h): the forward pass of a sequence's rows where
// only an "active" subset of rows is computed in each layer, the others keeping the K/V already
// in their slots. The per-layer steps are forward.cpp's own (layer_step.cpp), so with every row
// active this is an ordinary prefill.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine_impl.h"
#include "tessera/common/check.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/matmul.h"
#include "tessera/kernels/ops.h"

namespace tessera::worker {
std::span<float> CpuBackend::blend_layers(KvPool& pool, const BlendRows& r, int32_t* recomputed) {
  const ModelConfig& c = cfg_;
  BlendScratch& s = bs_;
  const int64_t dim = c.dim, hd = c.head_dim, hidden = c.hidden_dim;
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * hd, kv_dim = static_cast<int64_t>(c.n_kv_heads) * hd;
  const auto n = static_cast<int32_t>(r.tokens.size());
  const int32_t ps = pool.page_size();
  kernels::ThreadPool* tp = threads_.get();
  TS_CHECK(static_cast<int32_t>(r.role.size()) == n) << r.role.size() << " roles for " << n << " rows";

  int32_t n_reused = 0;
  for (const BlendRole role : r.role) n_reused += role == BlendRole::kReused ? 1 : 0;
  const bool check = n_reused > 0 && r.ratio > 0.0f && r.ratio < 1.0f && r.check_layer < c.n_layers;
  std::vector<int32_t>& act = s.active;  // active rows, ascending
  act.clear();
  for (int32_t i = 0; i < n; ++i) {
    const BlendRole role = r.role[static_cast<size_t>(i)];
    const bool last = i == n - 1 && r.want_logits;
    if (role == BlendRole::kNew || last || (role == BlendRole::kReused && r.ratio > 0.0f)) act.push_back(i);
  }
  if (recomputed != nullptr) {
    *recomputed = 0;
    if (!check && r.ratio > 0.0f) *recomputed = n_reused;
  }

  float* x = grow(s.x, static_cast<size_t>(act.size()) * dim);
  s.act_tokens.resize(act.size());
  for (size_t j = 0; j < act.size(); ++j) s.act_tokens[j] = r.tokens[static_cast<size_t>(act[j])];
  embed(s.act_tokens, x);
  const float scale = c.attn_scale > 0.0f ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));

  bool layout_stale = true;
  for (int32_t l = 0; l < c.n_layers && !act.empty(); ++l) {
    const auto T = static_cast<int64_t>(act.size());
    float* xn = grow(s.xn, static_cast<size_t>(T * dim));
    float* q = grow(s.q, static_cast<size_t>(T * q_dim));
    float* k = grow(s.k, static_cast<size_t>(T * kv_dim));
    float* v = grow(s.v, static_cast<size_t>(T * kv_dim));
    float* att = grow(s.att, static_cast<size_t>(T * q_dim));
    float* o = grow(s.o, static_cast<size_t>(T * dim));
    float* gate = grow(s.gate, static_cast<size_t>(T * hidden));
    float* up = grow(s.up, static_cast<size_t>(T * hidden));
    if (layout_stale) {  // positions, slots, RoPE table and attention runs of the active rows
      float* cs = grow(s.cos_sin, static_cast<size_t>(T * hd));
      s.positions.resize(static_cast<size_t>(T));
      s.slots.resize(static_cast<size_t>(T));
      s.token_indptr.assign(1, 0);
      s.page_indptr.assign(1, 0);
      s.start_pos.clear();
      s.page_ids.clear();
      for (int64_t j = 0; j < T; ++j) {
        const int32_t p = r.first + act[static_cast<size_t>(j)];
        s.positions[static_cast<size_t>(j)] = p;
        s.slots[static_cast<size_t>(j)] = static_cast<int64_t>(r.block_table[static_cast<size_t>(p / ps)]) * ps + p % ps;
        const bool run_ends = j + 1 == T || act[static_cast<size_t>(j + 1)] != act[static_cast<size_t>(j)] + 1;
        if (run_ends) {  // one "sequence" per run of consecutive cache indices
          const int32_t begin = s.token_indptr.back();
          s.start_pos.push_back(r.first + act[static_cast<size_t>(begin)]);
          s.token_indptr.push_back(static_cast<int32_t>(j + 1));
          s.page_ids.insert(s.page_ids.end(), r.block_table.begin(), r.block_table.begin() + (p / ps + 1));
          s.page_indptr.push_back(static_cast<int32_t>(s.page_ids.size()));
        }
      }
      kernels::rope_table(s.positions.data(), T, hd, c.rope_theta, cs,
                          c.rope_freq_factors.empty() ? nullptr : c.rope_freq_factors.data(), c.rope_freq_scale);
      layout_stale = false;
    }
    const float* cs = s.cos_sin.data();
    const LayerWeights& w = model_.layers[static_cast<size_t>(l)];
    kernels::rmsnorm(x, dim, w.attn_norm.f32(), xn, dim, T, dim, c.rms_eps);
    attention_qkv(w, xn, T, cs, q, k, v);

    const bool selecting = check && l == r.check_layer;
    if (selecting) {  // HKVD: deviation |V - V'|^2 of the fresh V from the reused V in the slots
      std::vector<float>& old = s.old_kv;
      old.resize(static_cast<size_t>(kv_dim));
      s.deviation.clear();
      for (int64_t j = 0; j < T; ++j) {
        if (r.role[static_cast<size_t>(act[static_cast<size_t>(j)])] != BlendRole::kReused) continue;
        double d = 0.0;
        pool.load(l, s.slots[static_cast<size_t>(j)], 1, old.data());
        const float* fresh = v + j * kv_dim;
        for (int64_t e = 0; e < kv_dim; ++e) {
          const double diff = static_cast<double>(fresh[e]) - old[static_cast<size_t>(e)];
          d += diff * diff;
        }
        s.deviation.emplace_back(d, static_cast<int32_t>(j));
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      pool.store(l, s.slots[static_cast<size_t>(t)], 0, k + t * kv_dim);
      pool.store(l, s.slots[static_cast<size_t>(t)], 1, v + t * kv_dim);
    }
    kernels::PagedAttentionArgs a{
        .q = q, .q_stride = q_dim, .out = att, .out_stride = q_dim, .kv = pool.layer_data(l), .kv_dtype = pool.dtype(),
        .page_size = ps, .n_heads = c.n_heads, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .scale = scale,
        .softcap = c.attn_softcap, .window = c.layer_uses_swa(l) ? c.sliding_window : 0,
        .n_seqs = static_cast<int32_t>(s.start_pos.size()), .token_indptr = s.token_indptr.data(),
        .start_pos = s.start_pos.data(), .page_indptr = s.page_indptr.data(), .page_ids = s.page_ids.data()};
    kernels::paged_attention(a, tp, isa_);
    linear(w.wo, att, q_dim, o, dim, T);
    residual_and_mlp(l, w, T, x, xn, o, gate, up, s_.moe,
                     l + 1 < c.n_layers ? &model_.layers[static_cast<size_t>(l) + 1] : nullptr);

    if (selecting) {  // keep the top ratio of the reused rows, every other row, and compact x
      auto& dev = s.deviation;
      const auto keep_n = std::min(dev.size(), static_cast<size_t>(std::ceil(static_cast<double>(r.ratio) * static_cast<double>(n_reused))));
      std::partial_sort(dev.begin(), dev.begin() + static_cast<std::ptrdiff_t>(keep_n), dev.end(),
                        [](const auto& p, const auto& q2) { return p.first != q2.first ? p.first > q2.first : p.second < q2.second; });
      std::vector<uint8_t>& keep = s.keep;
      keep.assign(static_cast<size_t>(T), 1);
      for (size_t i = keep_n; i < dev.size(); ++i) keep[static_cast<size_t>(dev[i].second)] = 0;
      if (r.want_logits) keep[static_cast<size_t>(T - 1)] = 1;  // the last row (act is ascending)
      int64_t out = 0;
      for (int64_t j = 0; j < T; ++j) {
        if (keep[static_cast<size_t>(j)] == 0) continue;
        if (out != j) std::copy(x + j * dim, x + (j + 1) * dim, x + out * dim);
        act[static_cast<size_t>(out++)] = act[static_cast<size_t>(j)];
      }
      act.resize(static_cast<size_t>(out));
      layout_stale = true;
      if (recomputed != nullptr) *recomputed = static_cast<int32_t>(keep_n);
    }
  }

  if (!r.want_logits || act.empty() || act.back() != n - 1) return {};
  const auto last = static_cast<int32_t>(act.size()) - 1;
  return logits_of(x, std::span(&last, 1), s.out_row, s.logits);
}

}  // namespace tessera::worker
