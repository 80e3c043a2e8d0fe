// Multi-head latent attention (DeepSeek-V2) of the CPU forward pass: the per-head Q, K and V
// decompressed from the latent (see engine_impl.h, CpuBackend::mla_qkv), with llama.cpp's YaRN
// RoPE on the rope part of each head.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine_impl.h"
#include "tessera/kernels/ops.h"

namespace tessera::worker {
namespace {

template <class T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// ggml's ggml_rope_yarn_corr_dim: the dimension at which `n_rot` rotations fit the original context.
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) * std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * static_cast<float>(M_PI))) /
         (2.0f * std::log(base));
}

}  // namespace

void mla_rope_table(const ModelConfig& c, const int32_t* positions, int64_t n, float* cos_sin) {
  const int n_dims = c.rope_dim;
  const float freq_scale = c.rope_freq_scale;
  const float ext_factor = c.rope_yarn ? 1.0f : 0.0f;
  // llama.cpp's build_deepseek2 passes attn_factor / (1 + 0.1 ln(1 / freq_scale)) to the RoPE;
  // ggml's rope_yarn multiplies it back when ext_factor != 0.
  float mscale = 1.0f / (1.0f + 0.1f * std::log(1.0f / freq_scale));
  if (ext_factor != 0.0f) mscale *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
  const int n_ctx_orig = c.yarn_orig_ctx > 0 ? c.yarn_orig_ctx : c.max_seq_len;
  const float low = std::max(0.0f, std::floor(yarn_corr_dim(n_dims, n_ctx_orig, 32.0f, c.rope_theta)));
  const float high = std::min(static_cast<float>(n_dims - 1), std::ceil(yarn_corr_dim(n_dims, n_ctx_orig, 1.0f, c.rope_theta)));
  for (int64_t t = 0; t < n; ++t) {
    for (int i0 = 0; i0 < n_dims; i0 += 2) {
      const double extrap = static_cast<double>(positions[t]) *
                            std::pow(static_cast<double>(c.rope_theta), -static_cast<double>(i0) / static_cast<double>(n_dims));
      double theta = static_cast<double>(freq_scale) * extrap;
      if (ext_factor != 0.0f) {
        const float y = (static_cast<float>(i0 / 2) - low) / std::max(0.001f, high - low);
        const double ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * ext_factor;
        theta = theta * (1.0 - ramp) + extrap * ramp;
      }
      cos_sin[t * n_dims + i0] = static_cast<float>(std::cos(theta)) * mscale;
      cos_sin[t * n_dims + i0 + 1] = static_cast<float>(std::sin(theta)) * mscale;
    }
  }
}

void CpuBackend::mla_qkv(const LayerWeights& w, const float* xn, int64_t T, const float* cs, float* q, float* k, float* v) {
  const ModelConfig& c = cfg_;
  MlaScratch& s = s_.mla;
  const int64_t dim = c.dim, hd = c.head_dim, H = c.n_heads, rope = c.rope_dim, nope = hd - rope, vd = c.v_head_dim;
  const int64_t lora = c.kv_lora_rank, kva_w = lora + rope, kvb_w = H * (nope + vd), q_dim = H * hd;
  auto linear = [&](const Tensor& wt, const float* in, int64_t in_stride, float* out, int64_t out_stride) {
    kernels::matmul({.w_type = wt.dtype, .w = wt.data, .rows = wt.rows, .cols = wt.cols, .x = in, .x_stride = in_stride,
                     .n = T, .y = out, .y_stride = out_stride},
                    pool_for(wt), isa_for(wt));
  };
  // Queries: attn_q, or the q LoRA (attn_q_a, its RMSNorm, attn_q_b).
  if (c.q_lora_rank > 0) {
    float* qa = grow(s.qa, static_cast<size_t>(T * c.q_lora_rank));
    linear(w.attn_q_a, xn, dim, qa, c.q_lora_rank);
    kernels::rmsnorm(qa, c.q_lora_rank, w.attn_q_a_norm.f32(), qa, c.q_lora_rank, T, c.q_lora_rank, c.rms_eps);
    linear(w.attn_q_b, qa, c.q_lora_rank, q, q_dim);
  } else {
    linear(w.wq, xn, dim, q, q_dim);
  }
  // The latent and the shared rope key; the latent's RMSNorm; its decompression per head.
  float* kva = grow(s.kva, static_cast<size_t>(T * kva_w));
  float* kvb = grow(s.kvb, static_cast<size_t>(T * kvb_w));
  linear(w.attn_kv_a_mqa, xn, dim, kva, kva_w);
  kernels::rmsnorm(kva, kva_w, w.attn_kv_a_norm.f32(), kva, kva_w, T, lora, c.rms_eps);
  linear(w.attn_kv_b, kva, kva_w, kvb, kvb_w);
  for (int64_t t = 0; t < T; ++t) {
    const float* cst = cs + t * rope;
    float* kpe = kva + t * kva_w + lora;
    for (int64_t i = 0; i < rope / 2; ++i) {  // adjacent pairs (llama.cpp's rope type NORM for deepseek2)
      const float co = cst[2 * i], si = cst[2 * i + 1], x0 = kpe[2 * i], x1 = kpe[2 * i + 1];
      kpe[2 * i] = x0 * co - x1 * si;
      kpe[2 * i + 1] = x0 * si + x1 * co;
    }
    for (int64_t h = 0; h < H; ++h) {
      float* qh = q + t * q_dim + h * hd + nope;
      for (int64_t i = 0; i < rope / 2; ++i) {
        const float co = cst[2 * i], si = cst[2 * i + 1], x0 = qh[2 * i], x1 = qh[2 * i + 1];
        qh[2 * i] = x0 * co - x1 * si;
        qh[2 * i + 1] = x0 * si + x1 * co;
      }
      const float* src = kvb + t * kvb_w + h * (nope + vd);
      float* kh = k + t * q_dim + h * hd;
      float* vh = v + t * q_dim + h * hd;
      std::memcpy(kh, src, static_cast<size_t>(nope) * sizeof(float));
      std::memcpy(kh + nope, kpe, static_cast<size_t>(rope) * sizeof(float));
      std::memcpy(vh, src + nope, static_cast<size_t>(vd) * sizeof(float));
      std::fill(vh + vd, vh + hd, 0.0f);  // V padded to the cache's head_dim
    }
  }
}

}  // namespace tessera::worker
