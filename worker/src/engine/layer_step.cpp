// The per-layer steps that the forward pass (forward.cpp) and CacheBlend's layer loop
// (blend_forward.cpp) share (engine_impl.h): one place for each family feature of a layer.
#include <cmath>

#include "engine_impl.h"
#include "tessera/kernels/activation.h"
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

void CpuBackend::hint_next(kernels::ThreadPool* pool, std::initializer_list<const Tensor*> next, int64_t T) {
  // Per thread, the first 128 KiB of its share (SmolLM2-135M Q4_0 decode, 2 threads, Zen 5:
  // docs/BENCHMARKS.md "Decode thread pool").
  constexpr size_t kBudget = 128 << 10;
  constexpr int kMax = kernels::ThreadPool::kMaxPrefetchRanges;
  if (T >= kernels::kPrefetchMaxTokens || pool == nullptr || pool->size() < 2 || next.size() == 0 ||
      next.size() > HintRanges::kMaxWeights) {
    return;
  }
  // The ranges depend on the weights, the pool and whether T makes a GEMV (the same for every
  // decode step): computed once per (weights, T).
  HintRanges& h = hints_[WeightKey{(*next.begin())->data, T}];
  bool same = h.pool == pool && h.n_weights == next.size();
  for (size_t i = 0; same && i < next.size(); ++i) same = h.weights[i] == next.begin()[i]->data;
  if (!same) {
    h = HintRanges{.pool = pool, .n_weights = next.size()};
    for (size_t i = 0; i < next.size(); ++i) h.weights[i] = next.begin()[i]->data;
    kernels::MatmulArgs args[HintRanges::kMaxWeights];
    size_t n = 0;
    for (const Tensor* t : next) {  // one matmul_batch: the same pool and kernel path for all
      if (t->empty() || pool_for(*t) != pool || isa_for(*t) != isa_for(**next.begin())) return;  // no hint
      args[n++] = matmul_args(*t, nullptr, t->cols, nullptr, t->rows, T, packed_for(*t));
    }
    h.ranges.resize(static_cast<size_t>(pool->size() * kMax));
    h.n.assign(static_cast<size_t>(pool->size()), 0);
    for (int p = 0; p < pool->size(); ++p) {
      const std::span<kernels::ThreadPool::PrefetchRange> out(h.ranges.data() + static_cast<size_t>(p * kMax), kMax);
      h.n[static_cast<size_t>(p)] = static_cast<uint8_t>(kernels::matmul_prefetch_ranges({args, n}, pool->size(), p, kBudget, out));
    }
  }
  if (h.ranges.empty()) return;
  for (int p = 0; p < pool->size(); ++p) {
    pool->hint_prefetch(p, {h.ranges.data() + static_cast<size_t>(p * kMax), h.n[static_cast<size_t>(p)]});
  }
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
                               float* v, KvStore store) {
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
  const bool interleaved = c.rope_layout == RopeLayout::kInterleaved;
  for_rows(T, [&](int64_t t) {  // token t's biases, per-head norms, rotation and K/V store
    float* qt = q + t * q_dim;
    float* kt = k + t * kv_dim;
    float* vt = v + t * kv_dim;
    if (c.attn_bias) {
      add_bias(w.bq, qt, q_dim, 1);
      add_bias(w.bk, kt, kv_dim, 1);
      add_bias(w.bv, vt, kv_dim, 1);
    }
    if (c.qk_norm) {  // per head: rows of head_dim (llama.cpp's build_qwen3: RMSNorm before RoPE)
      kernels::rmsnorm(qt, hd, w.attn_q_norm.f32(), qt, hd, c.n_heads, hd, c.rms_eps);
      kernels::rmsnorm(kt, hd, w.attn_k_norm.f32(), kt, hd, c.n_kv_heads, hd, c.rms_eps);
    }
    if (!c.is_mla()) {  // MLA rotates its rope parts in mla_qkv
      kernels::rope(qt, q_dim, 1, c.n_heads, hd, cs + t * hd, interleaved);
      kernels::rope(kt, kv_dim, 1, c.n_kv_heads, hd, cs + t * hd, interleaved);
    }
    if (store.slots != nullptr) {  // distinct slots: the rows write disjoint bytes
      pool_.store(store.layer, store.slots[t], 0, kt);
      pool_.store(store.layer, store.slots[t], 1, vt);
    }
  });
}

void CpuBackend::residual_and_mlp(int32_t layer, const LayerWeights& w, int64_t T, float* x, float* xn, float* o,
                                  float* gate, float* up, MoeScratch& moe, const LayerWeights* next_layer) {
  const ModelConfig& c = cfg_;
  const int64_t dim = c.dim, hidden = c.hidden_dim;
  for_rows(T, [&](int64_t t) {  // x += post_norm(o); xn = rmsnorm(x), row by row
    float* ot = o + t * dim;
    float* xt = x + t * dim;
    if (c.post_norms) kernels::rmsnorm(ot, dim, w.attn_post_norm.f32(), ot, dim, 1, dim, c.rms_eps);
    kernels::add_inplace(xt, ot, dim);
    kernels::rmsnorm(xt, dim, w.ffn_norm.f32(), xn + t * dim, dim, 1, dim, c.rms_eps);
  });
  if (c.layer_is_moe(layer)) {  // the routed experts' placement (pool, kernel path) applies to the whole MoE MLP
    moe_ffn(c, w, xn, T, o, moe, pool_for(w.ffn_gate_exps), isa_for(w.ffn_gate_exps),
            [this](const Tensor& m) { return packed_for(m); });
  } else {
    const kernels::MatmulArgs gate_up[2] = {matmul_args(w.w_gate, xn, dim, gate, hidden, T, packed_for(w.w_gate)),
                                            matmul_args(w.w_up, xn, dim, up, hidden, T, packed_for(w.w_up))};
    if (pool_for(w.w_gate) == pool_for(w.w_up) && isa_for(w.w_gate) == isa_for(w.w_up)) {
      hint_next(pool_for(w.w_gate), {&w.w_down}, T);
      kernels::matmul_batch(gate_up, pool_for(w.w_gate), isa_for(w.w_gate));
    } else {
      kernels::matmul(gate_up[0], pool_for(w.w_gate), isa_for(w.w_gate));
      kernels::matmul(gate_up[1], pool_for(w.w_up), isa_for(w.w_up));
    }
    const bool gelu = c.ffn_act == FfnActivation::kGeluTanh;
    const kernels::Isa isa = isa_;
    auto act = [&](int64_t t0, int64_t n) {  // SwiGLU on the backend's SIMD path (activation.h), GeGLU portable
      float* g = gate + t0 * hidden;
      const float* u = up + t0 * hidden;
      if (gelu) {
        kernels::gelu_tanh_mul(g, hidden, u, hidden, g, hidden, n, hidden);
      } else {
        kernels::swiglu(g, hidden, u, hidden, g, hidden, n, hidden, isa);
      }
    };
    if (T >= 4) {
      for_rows(T, [&](int64_t t) { act(t, 1); });
    } else {
      act(0, T);
    }
    if (next_layer != nullptr && !c.is_mla()) {
      hint_next(pool_for(w.w_down), {&next_layer->wq, &next_layer->wk, &next_layer->wv}, T);
    } else if (next_layer == nullptr && model_.output.rows == c.vocab_size) {  // logits_of's matmul, one row per token
      hint_next(pool_for(w.w_down), {&model_.output}, T);
    }
    linear(w.w_down, gate, hidden, o, dim, T);
  }
  for_rows(T, [&](int64_t t) {
    float* ot = o + t * dim;
    if (c.post_norms) kernels::rmsnorm(ot, dim, w.ffn_post_norm.f32(), ot, dim, 1, dim, c.rms_eps);
    kernels::add_inplace(x + t * dim, ot, dim);
  });
}

std::span<float> CpuBackend::logits_of(const float* x, std::span<const int32_t> rows, std::vector<float>& normed,
                                       std::vector<float>& logits) {
  const ModelConfig& c = cfg_;
  const int64_t dim = c.dim, n = static_cast<int64_t>(rows.size());
  if (n == 0) return {};
  float* xr = grow(normed, static_cast<size_t>(n * dim));
  for_rows(n, [&](int64_t i) {
    kernels::rmsnorm(x + static_cast<int64_t>(rows[static_cast<size_t>(i)]) * dim, dim, model_.final_norm.f32(), xr + i * dim,
                     dim, 1, dim, c.rms_eps);
  });
  float* out = grow(logits, static_cast<size_t>(n * c.vocab_size));
  kernels::matmul({.w_type = model_.output.dtype, .w = model_.output.data, .rows = c.vocab_size, .cols = dim, .x = xr,
                   .x_stride = dim, .n = n, .y = out, .y_stride = c.vocab_size, .w_packed = packed_for(model_.output)},
                  pool_for(model_.output), isa_for(model_.output));
  if (c.final_softcap > 0.0f) kernels::softcap(out, n * c.vocab_size, c.final_softcap);
  return {out, static_cast<size_t>(n * c.vocab_size)};
}

}  // namespace tessera::worker
