// The paged forward pass of one validated ragged batch.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine_impl.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/matmul.h"
#include "tessera/kernels/ops.h"

namespace tessera::worker {
kernels::ThreadPool* CpuBackend::pool_for(const Tensor& w) {
  const int32_t all = threads_->size();
  if (w.exec.thread_share >= 1.0f) return threads_.get();
  const int32_t n = std::clamp(static_cast<int32_t>(std::lround(w.exec.thread_share * static_cast<float>(all))), 1, all);
  if (n == all) return threads_.get();
  std::unique_ptr<kernels::ThreadPool>& p = share_pools_[static_cast<size_t>(n)];
  if (!p) p = std::make_unique<kernels::ThreadPool>(n);
  return p.get();
}

kernels::Isa CpuBackend::isa_for(const Tensor& w) const {
  switch (w.exec.path) {
    case MatmulPath::kBackend: return isa_;
    case MatmulPath::kScalar: return kernels::Isa::kScalar;
    case MatmulPath::kAvx2: return kernels::Isa::kAvx2;
    case MatmulPath::kAvx512: return kernels::Isa::kAvx512;
  }
  return isa_;
}

std::span<float> CpuBackend::run(std::span<const SeqInput> batch) {
  const ModelConfig& c = cfg_;
  const Model& model = model_;
  KvPool& pool = pool_;
  Scratch& s = s_;
  const kernels::Isa isa = isa_;
  const int64_t dim = c.dim, hd = c.head_dim, hidden = c.hidden_dim;
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * hd, kv_dim = static_cast<int64_t>(c.n_kv_heads) * hd;
  kernels::ThreadPool* tp = threads_.get();

  // Flatten the batch.
  s.token_indptr.assign(1, 0);
  s.page_indptr.assign(1, 0);
  s.start_pos.clear();
  s.page_ids.clear();
  s.positions.clear();
  s.slots.clear();
  s.out_row_index.clear();
  std::vector<int32_t>& tokens = s.tokens;
  tokens.clear();
  for (const SeqInput& in : batch) {
    for (size_t i = 0; i < in.tokens.size(); ++i) {
      tokens.push_back(in.tokens[i]);
      s.positions.push_back(in.start_pos + static_cast<int32_t>(i) + in.rope_offset);  // RoPE position
      s.slots.push_back(in.slot_mapping[i]);
    }
    const int64_t end = in.start_pos + static_cast<int64_t>(in.tokens.size());
    const int64_t np = (end + pool.page_size() - 1) / pool.page_size();
    s.page_ids.insert(s.page_ids.end(), in.block_table.begin(), in.block_table.begin() + np);
    s.page_indptr.push_back(static_cast<int32_t>(s.page_ids.size()));
    s.token_indptr.push_back(static_cast<int32_t>(tokens.size()));
    s.start_pos.push_back(in.start_pos);
    if (in.all_logits) {
      for (size_t i = in.tokens.size(); i > 0; --i) s.out_row_index.push_back(static_cast<int32_t>(tokens.size() - i));
    } else if (in.want_logits) {
      s.out_row_index.push_back(static_cast<int32_t>(tokens.size()) - 1);
    }
  }
  const int64_t T = static_cast<int64_t>(tokens.size());

  float* x = grow(s.x, static_cast<size_t>(T * dim));
  float* xn = grow(s.xn, static_cast<size_t>(T * dim));
  float* q = grow(s.q, static_cast<size_t>(T * q_dim));
  float* k = grow(s.k, static_cast<size_t>(T * kv_dim));
  float* v = grow(s.v, static_cast<size_t>(T * kv_dim));
  float* att = grow(s.att, static_cast<size_t>(T * q_dim));
  float* o = grow(s.o, static_cast<size_t>(T * dim));
  float* gate = grow(s.gate, static_cast<size_t>(T * hidden));
  float* up = grow(s.up, static_cast<size_t>(T * hidden));
  float* cs = grow(s.cos_sin, static_cast<size_t>(T * hd));

  // Embeddings and the RoPE table (shared by all layers).
  embed(tokens, x);
  if (c.is_mla()) {
    mla_rope_table(c, s.positions.data(), T, cs);  // rope_dim < head_dim values per row
  } else if (c.rope_yarn || c.rope_attn_factor != 1.0f) {  // llama.cpp's yarn_attn_factor 1 x rope.scaling.attn_factor
    yarn_rope_table(c, s.positions.data(), T, static_cast<int>(hd), c.rope_attn_factor, cs);
  } else {
    kernels::rope_table(s.positions.data(), T, hd, c.rope_theta, cs,
                        c.rope_freq_factors.empty() ? nullptr : c.rope_freq_factors.data(), c.rope_freq_scale);
  }

  const kernels::PagedAttentionArgs att_base{
      .q = q, .q_stride = q_dim, .out = att, .out_stride = q_dim, .kv = nullptr, .page_size = pool.page_size(),
      .n_heads = c.n_heads, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim,
      .scale = c.attn_scale > 0.0f ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd)),
      .softcap = c.attn_softcap, .window = 0, .n_seqs = static_cast<int32_t>(batch.size()),
      .token_indptr = s.token_indptr.data(), .start_pos = s.start_pos.data(), .page_indptr = s.page_indptr.data(),
      .page_ids = s.page_ids.data()};

  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model.layers[static_cast<size_t>(l)];
    // Attention block.
    for_rows(T, [&](int64_t t) { kernels::rmsnorm(x + t * dim, dim, w.attn_norm.f32(), xn + t * dim, dim, 1, dim, c.rms_eps); });
    if (c.is_mla() && pool.planes() == 1) {  // the latent cache: absorbed attention (mla.cpp)
      const int64_t vw = static_cast<int64_t>(c.n_heads) * c.v_head_dim;
      float* att_v = grow(s.mla.att_v, static_cast<size_t>(T * vw));
      mla_latent_attention(w, l, xn, T, cs, att_base, q, att_v);
      linear(w.wo, att_v, vw, o, dim, T);
    } else {
      attention_qkv(w, xn, T, cs, q, k, v, {.layer = l, .slots = s.slots.data()});  // K/V into the pool, row by row
      kernels::PagedAttentionArgs a = att_base;
      a.kv = pool.layer_data(l);
      a.kv_dtype = pool.dtype();
      a.window = c.layer_uses_swa(l) ? c.sliding_window : 0;
      hint_next(tp, {&w.wo}, T);
      kernels::paged_attention(a, tp, isa);
      for (size_t b = 0; b < batch.size(); ++b) {  // H2O sequences: attention mass per cache index
        if (batch[b].key_mass == nullptr) continue;
        accumulate_key_mass({.pool = &pool, .layer = l, .q = q + static_cast<int64_t>(s.token_indptr[b]) * q_dim,
                             .q_stride = q_dim, .n_rows = static_cast<int32_t>(batch[b].tokens.size()),
                             .start_pos = batch[b].start_pos, .pages = batch[b].block_table.data(),
                             .page_size = pool.page_size(), .n_heads = c.n_heads, .n_kv_heads = c.n_kv_heads,
                             .head_dim = c.head_dim, .scale = a.scale, .softcap = a.softcap, .window = a.window,
                             .mass = batch[b].key_mass});
      }
      if (c.is_mla()) {  // each head's first v_head_dim outputs (the rest is the zero padding of V)
        const int64_t vd = c.v_head_dim, vw = static_cast<int64_t>(c.n_heads) * vd;
        float* att_v = grow(s.mla.att_v, static_cast<size_t>(T * vw));
        for (int64_t t = 0; t < T; ++t) {
          for (int32_t h = 0; h < c.n_heads; ++h) std::memcpy(att_v + t * vw + h * vd, att + t * q_dim + h * hd, static_cast<size_t>(vd) * sizeof(float));
        }
        linear(w.wo, att_v, vw, o, dim, T);
      } else {
        if (!c.layer_is_moe(l)) hint_next(pool_for(w.wo), {&w.w_gate, &w.w_up}, T);
        linear(w.wo, att, q_dim, o, dim, T);
      }
    }
    residual_and_mlp(l, w, T, x, xn, o, gate, up, s.moe,
                     l + 1 < c.n_layers ? &model.layers[static_cast<size_t>(l) + 1] : nullptr);
  }

  // Logits of the rows that asked for them.
  return logits_of(x, s.out_row_index, s.out_rows, s.logits);
}

}  // namespace tessera::worker
