// The paged forward pass of one validated ragged batch.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine_impl.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/matmul.h"
#include "tessera/kernels/ops.h"

namespace tessera::worker {
namespace {

template <class T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

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
  using kernels::matmul;
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
  const size_t emb_row = dtype_row_bytes(model.tok_embeddings.dtype, dim);
  for (int64_t t = 0; t < T; ++t) {
    kernels::dequantize_row(model.tok_embeddings.dtype,
                            static_cast<const uint8_t*>(model.tok_embeddings.data) + static_cast<size_t>(tokens[static_cast<size_t>(t)]) * emb_row,
                            x + t * dim, dim);
  }
  if (c.embedding_scale != 1.0f) kernels::scale_inplace(x, T * dim, c.embedding_scale);
  if (c.is_mla()) {
    mla_rope_table(c, s.positions.data(), T, cs);  // rope_dim < head_dim values per row
  } else {
    kernels::rope_table(s.positions.data(), T, hd, c.rope_theta, cs,
                        c.rope_freq_factors.empty() ? nullptr : c.rope_freq_factors.data(), c.rope_freq_scale);
  }
  const bool interleaved = c.rope_layout == RopeLayout::kInterleaved;

  auto args = [&](const Tensor& w, const float* in, int64_t in_stride, float* out, int64_t out_stride) {
    return kernels::MatmulArgs{.w_type = w.dtype, .w = w.data, .rows = w.rows, .cols = w.cols, .x = in,
                               .x_stride = in_stride, .n = T, .y = out, .y_stride = out_stride};
  };
  auto linear = [&](const Tensor& w, const float* in, int64_t in_stride, float* out, int64_t out_stride) {
    matmul(args(w, in, in_stride, out, out_stride), pool_for(w), isa_for(w));
  };
  // Matmuls of the same input in one parallel region when their placements agree (the usual case).
  auto linear_group = [&](std::span<const Tensor* const> ws, std::span<const kernels::MatmulArgs> list) {
    bool same = true;
    for (const Tensor* w : ws) same = same && pool_for(*w) == pool_for(*ws[0]) && isa_for(*w) == isa_for(*ws[0]);
    if (same) {
      kernels::matmul_batch(list, pool_for(*ws[0]), isa_for(*ws[0]));
      return;
    }
    for (size_t i = 0; i < list.size(); ++i) matmul(list[i], pool_for(*ws[i]), isa_for(*ws[i]));
  };
  auto add_bias = [&](const Tensor& b, float* out, int64_t width) {
    if (b.empty()) return;
    for (int64_t t = 0; t < T; ++t) kernels::add_inplace(out + t * width, b.f32(), width);
  };

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
    kernels::rmsnorm(x, dim, w.attn_norm.f32(), xn, dim, T, dim, c.rms_eps);
    if (c.is_mla() && pool.planes() == 1) {  // the latent cache: absorbed attention (mla.cpp)
      const int64_t vw = static_cast<int64_t>(c.n_heads) * c.v_head_dim;
      float* att_v = grow(s.mla.att_v, static_cast<size_t>(T * vw));
      mla_latent_attention(w, l, xn, T, cs, att_base, q, att_v);
      linear(w.wo, att_v, vw, o, dim);
    } else {
      if (c.is_mla()) {
        mla_qkv(w, xn, T, cs, q, k, v);
      } else {
        const kernels::MatmulArgs qkv[3] = {args(w.wq, xn, dim, q, q_dim), args(w.wk, xn, dim, k, kv_dim),
                                            args(w.wv, xn, dim, v, kv_dim)};
        const Tensor* const ws[3] = {&w.wq, &w.wk, &w.wv};
        linear_group(ws, qkv);
      }
      if (c.attn_bias) {
        add_bias(w.bq, q, q_dim);
        add_bias(w.bk, k, kv_dim);
        add_bias(w.bv, v, kv_dim);
      }
      if (c.qk_norm) {  // per head: rows of head_dim (llama.cpp's build_qwen3: RMSNorm before RoPE)
        kernels::rmsnorm(q, hd, w.attn_q_norm.f32(), q, hd, T * c.n_heads, hd, c.rms_eps);
        kernels::rmsnorm(k, hd, w.attn_k_norm.f32(), k, hd, T * c.n_kv_heads, hd, c.rms_eps);
      }
      if (!c.is_mla()) {
        kernels::rope(q, q_dim, T, c.n_heads, hd, cs, interleaved);
        kernels::rope(k, kv_dim, T, c.n_kv_heads, hd, cs, interleaved);
      }
      for (int64_t t = 0; t < T; ++t) {
        const int64_t slot = s.slots[static_cast<size_t>(t)];
        pool.store(l, slot, 0, k + t * kv_dim);
        pool.store(l, slot, 1, v + t * kv_dim);
      }
      kernels::PagedAttentionArgs a = att_base;
      a.kv = pool.layer_data(l);
      a.kv_dtype = pool.dtype();
      a.window = c.layer_uses_swa(l) ? c.sliding_window : 0;
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
        linear(w.wo, att_v, vw, o, dim);
      } else {
        linear(w.wo, att, q_dim, o, dim);
      }
    }
    if (c.post_norms) kernels::rmsnorm(o, dim, w.attn_post_norm.f32(), o, dim, T, dim, c.rms_eps);
    kernels::add_inplace(x, o, T * dim);
    // MLP block.
    kernels::rmsnorm(x, dim, w.ffn_norm.f32(), xn, dim, T, dim, c.rms_eps);
    if (c.layer_is_moe(l)) {  // the routed experts' placement (pool, kernel path) applies to the whole MoE MLP
      moe_ffn(c, w, xn, T, o, s.moe, pool_for(w.ffn_gate_exps), isa_for(w.ffn_gate_exps));
    } else {
      {
        const kernels::MatmulArgs gate_up[2] = {args(w.w_gate, xn, dim, gate, hidden), args(w.w_up, xn, dim, up, hidden)};
        const Tensor* const ws[2] = {&w.w_gate, &w.w_up};
        linear_group(ws, gate_up);
      }
      const auto act = c.ffn_act == FfnActivation::kGeluTanh ? kernels::gelu_tanh_mul : kernels::silu_mul;
      if (T >= 4) {  // rows in parallel: exact, and a visible share of a many-sequence decode step
        tp->parallel_for(T, [&](int64_t t) {
          act(gate + t * hidden, hidden, up + t * hidden, hidden, gate + t * hidden, hidden, 1, hidden);
        });
      } else {
        act(gate, hidden, up, hidden, gate, hidden, T, hidden);
      }
      linear(w.w_down, gate, hidden, o, dim);
    }
    if (c.post_norms) kernels::rmsnorm(o, dim, w.ffn_post_norm.f32(), o, dim, T, dim, c.rms_eps);
    kernels::add_inplace(x, o, T * dim);
  }

  // Logits of the rows that asked for them.
  const int64_t n_out = static_cast<int64_t>(s.out_row_index.size());
  if (n_out == 0) return {};
  float* rows = grow(s.out_rows, static_cast<size_t>(n_out * dim));
  for (int64_t i = 0; i < n_out; ++i) {
    kernels::rmsnorm(x + s.out_row_index[static_cast<size_t>(i)] * dim, dim, model.final_norm.f32(), rows + i * dim, dim, 1,
                     dim, c.rms_eps);
  }
  float* logits = grow(s.logits, static_cast<size_t>(n_out * c.vocab_size));
  matmul({.w_type = model.output.dtype, .w = model.output.data, .rows = c.vocab_size, .cols = dim, .x = rows,
          .x_stride = dim, .n = n_out, .y = logits, .y_stride = c.vocab_size},
         pool_for(model.output), isa_for(model.output));
  if (c.final_softcap > 0.0f) kernels::softcap(logits, n_out * c.vocab_size, c.final_softcap);
  return {logits, static_cast<size_t>(n_out * c.vocab_size)};
}

}  // namespace tessera::worker
