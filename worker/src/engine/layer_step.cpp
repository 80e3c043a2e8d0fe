// The per-layer steps that the forward pass (forward.cpp) and CacheBlend's layer loop
// (blend_forward.cpp) share (engine_impl.h): one place for each family feature of a layer.
#include <cmath>

#include "engine_impl.h"
#include "tessera/kernels/matmul.h"
#include "tessera/kernels/ops.h"

namespace tessera::worker {
namespace {

void add_bias(const Tensor& b, float* out, int64_t width, int64_t T) {
  if (b.empty()) return;
  for (int64_t t = 0; t < T; ++t) kernels::add_inplace(out + t * width, b.f32(), width);
}

}  // namespace

void CpuBackend::linear(const Tensor& w, const float* in, int64_t in_stride, float* out, int64_t out_stride, int64_t T) {
  kernels::matmul(matmul_args(w, in, in_stride, out, out_stride, T, packed_for(w)), pool_for(w), isa_for(w));
}

void CpuBackend::embed(std::span<const int32_t> tokens, float* x) {
  const Tensor& e = model_.tok_embeddings;
  const int64_t dim = cfg_.dim;
  const size_t row = dtype_row_bytes(e.dtype, dim);
  for (size_t t = 0; t < tokens.size(); ++t) {
    kernels::dequantize_row(e.dtype, static_cast<const uint8_t*>(e.data) + static_cast<size_t>(tokens[t]) * row,
                            x + static_cast<int64_t>(t) * dim, dim);
  }
  if (cfg_.embedding_scale != 1.0f) kernels::scale_inplace(x, static_cast<int64_t>(tokens.size()) * dim, cfg_.embedding_scale);
}

void CpuBackend::attention_qkv(const LayerWeights& w, const float* xn, int64_t T, const float* cs, float* q, float* k,
                               float* v) {
  const ModelConfig& c = cfg_;
  const int64_t dim = c.dim, hd = c.head_dim;
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * hd, kv_dim = static_cast<int64_t>(c.n_kv_heads) * hd;
  if (c.is_mla()) {
    mla_qkv(w, xn, T, cs, q, k, v);
  } else {
    const kernels::MatmulArgs qkv[3] = {matmul_args(w.wq, xn, dim, q, q_dim, T, packed_for(w.wq)),
                                        matmul_args(w.wk, xn, dim, k, kv_dim, T, packed_for(w.wk)),
                                        matmul_args(w.wv, xn, dim, v, kv_dim, T, packed_for(w.wv))};
    const Tensor* const ws[3] = {&w.wq, &w.wk, &w.wv};
    bool same = true;  // one parallel region when the placements agree (the usual case)
    for (const Tensor* t : ws) same = same && pool_for(*t) == pool_for(w.wq) && isa_for(*t) == isa_for(w.wq);
    if (same) {
      kernels::matmul_batch(qkv, pool_for(w.wq), isa_for(w.wq));
    } else {
      for (size_t i = 0; i < 3; ++i) kernels::matmul(qkv[i], pool_for(*ws[i]), isa_for(*ws[i]));
    }
  }
  if (c.attn_bias) {
    add_bias(w.bq, q, q_dim, T);
    add_bias(w.bk, k, kv_dim, T);
    add_bias(w.bv, v, kv_dim, T);
  }
  if (c.qk_norm) {  // per head: rows of head_dim (llama.cpp's build_qwen3: RMSNorm before RoPE)
    kernels::rmsnorm(q, hd, w.attn_q_norm.f32(), q, hd, T * c.n_heads, hd, c.rms_eps);
    kernels::rmsnorm(k, hd, w.attn_k_norm.f32(), k, hd, T * c.n_kv_heads, hd, c.rms_eps);
  }
  if (!c.is_mla()) {
    const bool interleaved = c.rope_layout == RopeLayout::kInterleaved;
    kernels::rope(q, q_dim, T, c.n_heads, hd, cs, interleaved);
    kernels::rope(k, kv_dim, T, c.n_kv_heads, hd, cs, interleaved);
  }
}

void CpuBackend::residual_and_mlp(int32_t layer, const LayerWeights& w, int64_t T, float* x, float* xn, float* o,
                                  float* gate, float* up, MoeScratch& moe) {
  const ModelConfig& c = cfg_;
  const int64_t dim = c.dim, hidden = c.hidden_dim;
  if (c.post_norms) kernels::rmsnorm(o, dim, w.attn_post_norm.f32(), o, dim, T, dim, c.rms_eps);
  kernels::add_inplace(x, o, T * dim);
  kernels::rmsnorm(x, dim, w.ffn_norm.f32(), xn, dim, T, dim, c.rms_eps);
  if (c.layer_is_moe(layer)) {  // the routed experts' placement (pool, kernel path) applies to the whole MoE MLP
    moe_ffn(c, w, xn, T, o, moe, pool_for(w.ffn_gate_exps), isa_for(w.ffn_gate_exps));
  } else {
    const kernels::MatmulArgs gate_up[2] = {matmul_args(w.w_gate, xn, dim, gate, hidden, T, packed_for(w.w_gate)),
                                            matmul_args(w.w_up, xn, dim, up, hidden, T, packed_for(w.w_up))};
    if (pool_for(w.w_gate) == pool_for(w.w_up) && isa_for(w.w_gate) == isa_for(w.w_up)) {
      kernels::matmul_batch(gate_up, pool_for(w.w_gate), isa_for(w.w_gate));
    } else {
      kernels::matmul(gate_up[0], pool_for(w.w_gate), isa_for(w.w_gate));
      kernels::matmul(gate_up[1], pool_for(w.w_up), isa_for(w.w_up));
    }
    const auto act = c.ffn_act == FfnActivation::kGeluTanh ? kernels::gelu_tanh_mul : kernels::silu_mul;
    if (T >= 4) {  // rows in parallel: exact, and a visible share of a many-sequence decode step
      threads_->parallel_for(T, [&](int64_t t) {
        act(gate + t * hidden, hidden, up + t * hidden, hidden, gate + t * hidden, hidden, 1, hidden);
      });
    } else {
      act(gate, hidden, up, hidden, gate, hidden, T, hidden);
    }
    linear(w.w_down, gate, hidden, o, dim, T);
  }
  if (c.post_norms) kernels::rmsnorm(o, dim, w.ffn_post_norm.f32(), o, dim, T, dim, c.rms_eps);
  kernels::add_inplace(x, o, T * dim);
}

std::span<float> CpuBackend::logits_of(const float* x, std::span<const int32_t> rows, std::vector<float>& normed,
                                       std::vector<float>& logits) {
  const ModelConfig& c = cfg_;
  const int64_t dim = c.dim, n = static_cast<int64_t>(rows.size());
  if (n == 0) return {};
  float* xr = grow(normed, static_cast<size_t>(n * dim));
  for (int64_t i = 0; i < n; ++i) {
    kernels::rmsnorm(x + static_cast<int64_t>(rows[static_cast<size_t>(i)]) * dim, dim, model_.final_norm.f32(), xr + i * dim,
                     dim, 1, dim, c.rms_eps);
  }
  float* out = grow(logits, static_cast<size_t>(n * c.vocab_size));
  kernels::matmul({.w_type = model_.output.dtype, .w = model_.output.data, .rows = c.vocab_size, .cols = dim, .x = xr,
                   .x_stride = dim, .n = n, .y = out, .y_stride = c.vocab_size, .w_packed = packed_for(model_.output)},
                  pool_for(model_.output), isa_for(model_.output));
  if (c.final_softcap > 0.0f) kernels::softcap(out, n * c.vocab_size, c.final_softcap);
  return {out, static_cast<size_t>(n * c.vocab_size)};
}

}  // namespace tessera::worker
