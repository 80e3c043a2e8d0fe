// Multi-head latent attention (DeepSeek-V2) of the CPU forward pass, with llama.cpp's YaRN RoPE
// on the rope part of each head: either the per-head Q, K and V decompressed from the latent
// (CpuBackend::mla_qkv, the cache holds per-head K/V) or attention over a cache of latent rows
// (CpuBackend::mla_latent_attention): the absorbed form for few query rows (decode), per-head
// K/V expanded on the fly from the context's latent rows for a prefill chunk. See engine_impl.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine_impl.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/ops.h"

namespace tessera::worker {
namespace {

// ggml's ggml_rope_yarn_corr_dim: the dimension at which `n_rot` rotations fit the original context.
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) * std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * static_cast<float>(M_PI))) /
         (2.0f * std::log(base));
}

}  // namespace

void mla_rope_table(const ModelConfig& c, const int32_t* positions, int64_t n, float* cos_sin) {
  // llama.cpp's build_deepseek2 passes attn_factor / (1 + 0.1 ln(1 / freq_scale)) to the RoPE;
  // ggml's rope_yarn multiplies it back when ext_factor != 0.
  yarn_rope_table(c, positions, n, c.rope_dim, 1.0f / (1.0f + 0.1f * std::log(1.0f / c.rope_freq_scale)), cos_sin);
}

void yarn_rope_table(const ModelConfig& c, const int32_t* positions, int64_t n, int n_dims, float attn_factor, float* cos_sin) {
  const float freq_scale = c.rope_freq_scale;
  const float ext_factor = c.rope_yarn ? 1.0f : 0.0f;
  float mscale = attn_factor;
  if (ext_factor != 0.0f) mscale *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
  const float* factors = c.rope_freq_factors.empty() ? nullptr : c.rope_freq_factors.data();
  const int n_ctx_orig = c.yarn_orig_ctx > 0 ? c.yarn_orig_ctx : c.max_seq_len;
  const float low = std::max(0.0f, std::floor(yarn_corr_dim(n_dims, n_ctx_orig, 32.0f, c.rope_theta)));
  const float high = std::min(static_cast<float>(n_dims - 1), std::ceil(yarn_corr_dim(n_dims, n_ctx_orig, 1.0f, c.rope_theta)));
  for (int64_t t = 0; t < n; ++t) {
    for (int i0 = 0; i0 < n_dims; i0 += 2) {
      double extrap = static_cast<double>(positions[t]) *
                      std::pow(static_cast<double>(c.rope_theta), -static_cast<double>(i0) / static_cast<double>(n_dims));
      if (factors != nullptr) extrap /= static_cast<double>(factors[i0 / 2]);  // ggml: theta_extrap / freq_factor
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

// Queries [T, n_heads * head_dim] and the latent rows kva [T, kv_lora_rank + rope_dim] (c
// normalized, k_pe and every head's q_pe rotated) of T normalized rows: the part both layouts share.
void CpuBackend::mla_q_latent(const LayerWeights& w, const float* xn, int64_t T, const float* cs, float* q, float* kva) {
  const ModelConfig& c = cfg_;
  MlaScratch& s = s_.mla;
  const int64_t dim = c.dim, hd = c.head_dim, H = c.n_heads, rope = c.rope_dim, nope = hd - rope;
  const int64_t lora = c.kv_lora_rank, kva_w = lora + rope, q_dim = H * hd;
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
  // The latent and the shared rope key; the latent's RMSNorm.
  linear(w.attn_kv_a_mqa, xn, dim, kva, kva_w);
  kernels::rmsnorm(kva, kva_w, w.attn_kv_a_norm.f32(), kva, kva_w, T, lora, c.rms_eps);
  auto rotate = [](float* x, const float* cst, int64_t n) {  // adjacent pairs (llama.cpp's rope type NORM for deepseek2)
    for (int64_t i = 0; i < n / 2; ++i) {
      const float co = cst[2 * i], si = cst[2 * i + 1], x0 = x[2 * i], x1 = x[2 * i + 1];
      x[2 * i] = x0 * co - x1 * si;
      x[2 * i + 1] = x0 * si + x1 * co;
    }
  };
  for (int64_t t = 0; t < T; ++t) {
    rotate(kva + t * kva_w + lora, cs + t * rope, rope);
    for (int64_t h = 0; h < H; ++h) rotate(q + t * q_dim + h * hd + nope, cs + t * rope, rope);
  }
}

void CpuBackend::mla_qkv(const LayerWeights& w, const float* xn, int64_t T, const float* cs, float* q, float* k, float* v) {
  const ModelConfig& c = cfg_;
  MlaScratch& s = s_.mla;
  const int64_t hd = c.head_dim, H = c.n_heads, rope = c.rope_dim, nope = hd - rope, vd = c.v_head_dim;
  const int64_t lora = c.kv_lora_rank, kva_w = lora + rope, kvb_w = H * (nope + vd), q_dim = H * hd;
  float* kva = grow(s.kva, static_cast<size_t>(T * kva_w));
  float* kvb = grow(s.kvb, static_cast<size_t>(T * kvb_w));
  mla_q_latent(w, xn, T, cs, q, kva);
  // The latent's decompression per head.
  kernels::matmul({.w_type = w.attn_kv_b.dtype, .w = w.attn_kv_b.data, .rows = w.attn_kv_b.rows, .cols = w.attn_kv_b.cols,
                   .x = kva, .x_stride = kva_w, .n = T, .y = kvb, .y_stride = kvb_w},
                  pool_for(w.attn_kv_b), isa_for(w.attn_kv_b));
  for (int64_t t = 0; t < T; ++t) {
    const float* kpe = kva + t * kva_w + lora;
    for (int64_t h = 0; h < H; ++h) {
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

size_t CpuBackend::prepare_mla() {
  if (!cfg_.is_mla() || pool_.planes() != 1) return 0;
  size_t bytes = 0;
  for (int32_t l = 0; l < cfg_.n_layers; ++l) {
    const MlaAbsorbed& ab = mla_absorbed(l, model_.layers[static_cast<size_t>(l)]);
    bytes += (ab.uk_t.size() + ab.uv.size()) * sizeof(float);
  }
  return bytes;
}

const CpuBackend::MlaAbsorbed& CpuBackend::mla_absorbed(int32_t layer, const LayerWeights& w) {
  if (mla_absorbed_.empty()) mla_absorbed_.resize(static_cast<size_t>(cfg_.n_layers));
  MlaAbsorbed& ab = mla_absorbed_[static_cast<size_t>(layer)];
  if (!ab.uv.empty()) return ab;
  const ModelConfig& c = cfg_;
  const int64_t H = c.n_heads, nope = c.head_dim - c.rope_dim, vd = c.v_head_dim, lora = c.kv_lora_rank;
  const Tensor& kvb = w.attn_kv_b;
  const size_t row_bytes = dtype_row_bytes(kvb.dtype, lora);
  ab.uk_t.resize(static_cast<size_t>(H * lora * nope));
  ab.uv.resize(static_cast<size_t>(H * vd * lora));
  std::vector<float> row(static_cast<size_t>(lora));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t r = 0; r < nope + vd; ++r) {
      kernels::dequantize_row(kvb.dtype, static_cast<const uint8_t*>(kvb.data) + static_cast<size_t>(h * (nope + vd) + r) * row_bytes,
                              row.data(), lora);
      for (int64_t j = 0; j < lora; ++j) {
        if (r < nope) {
          ab.uk_t[static_cast<size_t>((h * lora + j) * nope + r)] = row[static_cast<size_t>(j)];  // transposed
        } else {
          ab.uv[static_cast<size_t>((h * vd + r - nope) * lora + j)] = row[static_cast<size_t>(j)];
        }
      }
    }
  }
  return ab;
}

void CpuBackend::mla_latent_attention(const LayerWeights& w, int32_t layer, const float* xn, int64_t T, const float* cs,
                                      const kernels::PagedAttentionArgs& base, float* q, float* att_v) {
  const ModelConfig& c = cfg_;
  MlaScratch& s = s_.mla;
  const int64_t lw = c.kv_lora_rank + c.rope_dim;
  const Tensor& kvb = w.attn_kv_b;
  float* kva = grow(s.kva, static_cast<size_t>(T * lw));
  mla_q_latent(w, xn, T, cs, q, kva);
  // The cached latent is c as attn_kv_b's matmul reads it (its activation rounding: Q8_0 or
  // Q8_K blocks for quantized weights), so that scores and values equal the decompressed
  // path's up to float rounding; k_pe is kept as computed.
  for (int64_t t = 0; t < T; ++t) {
    kernels::round_as_matmul_input(kvb.dtype, kva + t * lw, c.kv_lora_rank);
    pool_.store(layer, s_.slots[static_cast<size_t>(t)], 0, kva + t * lw);
  }
  // A sequence with at least mla_expand_rows_ rows in this step (a prefill chunk) attends over
  // per-head K/V expanded from its context's latent rows; runs of the others (decode) take the
  // absorbed form together.
  // The expanded form's scratch (latent rows, their expansion, the K/V page) grows with the
  // context: past kMlaExpandMaxBytes a chunk takes the absorbed form.
  const int64_t per_token = 4 * (lw + int64_t{c.n_heads} * (2 * c.head_dim + c.head_dim - c.rope_dim + c.v_head_dim));
  const int32_t* ip = base.token_indptr;
  auto expand = [&](int32_t b) {
    return ip[b + 1] - ip[b] >= mla_expand_rows_ && (base.start_pos[b] + ip[b + 1] - ip[b]) * per_token <= kMlaExpandMaxBytes;
  };
  for (int32_t s0 = 0; s0 < base.n_seqs;) {
    int32_t s1 = s0 + 1;
    if (expand(s0)) {
      mla_expanded_attention(w, layer, base, s0, q, att_v);
    } else {
      while (s1 < base.n_seqs && !expand(s1)) ++s1;
      mla_absorbed_attention(w, layer, base, s0, s1, q, att_v);
    }
    s0 = s1;
  }
}

void CpuBackend::mla_absorbed_attention(const LayerWeights& w, int32_t layer, const kernels::PagedAttentionArgs& base,
                                        int32_t s0, int32_t s1, const float* q, float* att_v) {
  const ModelConfig& c = cfg_;
  MlaScratch& s = s_.mla;
  const int64_t hd = c.head_dim, H = c.n_heads, rope = c.rope_dim, nope = hd - rope, vd = c.v_head_dim;
  const int64_t lora = c.kv_lora_rank, lw = lora + rope, q_dim = H * hd, qa_w = H * lw;
  const int64_t r0 = base.token_indptr[s0], r1 = base.token_indptr[s1], n = r1 - r0;
  const int64_t T = base.token_indptr[base.n_seqs];

  // Absorbed queries [T, H, lw] (rows r0..r1): q_lat = W_UK_h^T q_nope (W_UK_h: head h's k_nope
  // rows of attn_kv_b, [nope, lora]), then q_pe. Score q_lat . c + q_pe . k_pe = q_nope . (W_UK_h c) + q_pe . k_pe.
  const MlaAbsorbed& ab = mla_absorbed(layer, w);
  float* qa = grow(s.q_abs, static_cast<size_t>(T * qa_w));
  for (int64_t t = r0; t < r1; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(qa + t * qa_w + h * lw + lora, q + t * q_dim + h * hd + nope, static_cast<size_t>(rope) * sizeof(float));
    }
  }
  std::vector<kernels::MatmulArgs>& list = s.uv_list;
  list.clear();
  for (int64_t h = 0; h < H; ++h) {
    list.push_back({.w_type = DType::kF32, .w = ab.uk_t.data() + h * lora * nope, .rows = lora, .cols = nope,
                    .x = q + r0 * q_dim + h * hd, .x_stride = q_dim, .n = n, .y = qa + r0 * qa_w + h * lw, .y_stride = qa_w});
  }
  kernels::matmul_batch(list, threads_.get(), isa_);

  // Attention over the latent rows: one kv head of lw values, each row its own V. The run's
  // sequences: the step's arrays from s0 on (row indices stay absolute).
  float* out = grow(s.att_lat, static_cast<size_t>(T * qa_w));
  kernels::PagedAttentionArgs a = base;
  a.q = qa;
  a.q_stride = qa_w;
  a.out = out;
  a.out_stride = qa_w;
  a.kv = pool_.layer_data(layer);
  a.kv_dtype = pool_.dtype();
  a.kv_planes = 1;
  a.n_kv_heads = 1;
  a.head_dim = static_cast<int32_t>(lw);
  a.n_seqs = s1 - s0;
  a.token_indptr = base.token_indptr + s0;
  a.start_pos = base.start_pos + s0;
  a.page_indptr = base.page_indptr + s0;
  kernels::paged_attention(a, threads_.get(), isa_);

  // Each head's latent output (its first lora values; the rest is the weighted k_pe) through
  // W_UV_h (head h's V rows, [vd, lora], f32): att_v [T, H * vd]. One f32 matmul per head, all
  // in one parallel region.
  list.clear();
  for (int64_t h = 0; h < H; ++h) {
    list.push_back({.w_type = DType::kF32, .w = ab.uv.data() + h * vd * lora, .rows = vd, .cols = lora,
                    .x = out + r0 * qa_w + h * lw, .x_stride = qa_w, .n = n, .y = att_v + r0 * H * vd + h * vd, .y_stride = H * vd});
  }
  kernels::matmul_batch(list, threads_.get(), isa_);
}

void CpuBackend::mla_expanded_attention(const LayerWeights& w, int32_t layer, const kernels::PagedAttentionArgs& base,
                                        int32_t b, const float* q, float* att_v) {
  const ModelConfig& c = cfg_;
  MlaScratch& s = s_.mla;
  const int64_t hd = c.head_dim, H = c.n_heads, rope = c.rope_dim, nope = hd - rope, vd = c.v_head_dim;
  const int64_t lora = c.kv_lora_rank, lw = lora + rope, q_dim = H * hd, kvb_w = H * (nope + vd);
  const int32_t r0 = base.token_indptr[b], n = base.token_indptr[b + 1] - r0;
  const int32_t L = base.start_pos[b] + n;  // the context: positions [0, L), this step's rows included
  const int32_t ps = base.page_size;
  const int32_t* pages = base.page_ids + base.page_indptr[b];

  // The context's latent rows [L, lw] (decoded from the page dtype), then one matmul through
  // attn_kv_b (its own type and kernel, as the decompressed layout computes K and V).
  float* lat = grow(s.lat, static_cast<size_t>(L) * static_cast<size_t>(lw));
  for (int32_t p = 0; p < L; ++p) pool_.load(layer, int64_t{pages[p / ps]} * ps + p % ps, 0, lat + p * lw);
  float* kvb = grow(s.kvb, static_cast<size_t>(L) * static_cast<size_t>(kvb_w));
  kernels::matmul({.w_type = w.attn_kv_b.dtype, .w = w.attn_kv_b.data, .rows = w.attn_kv_b.rows, .cols = w.attn_kv_b.cols,
                   .x = lat, .x_stride = lw, .n = L, .y = kvb, .y_stride = kvb_w},
                  pool_for(w.attn_kv_b), isa_for(w.attn_kv_b));

  // One f32 page of L tokens in the decompressed layout [K plane, V plane][L][H][hd]: K = [W_UK_h c,
  // k_pe], V = W_UV_h c zero-padded to hd.
  const int64_t plane = static_cast<int64_t>(L) * q_dim;
  float* kv = grow(s.kv_exp, static_cast<size_t>(2 * plane));
  threads_->parallel_for((L + 15) / 16, [&](int64_t blk) {
    for (int64_t t = blk * 16; t < std::min<int64_t>(L, blk * 16 + 16); ++t) {
      const float* kpe = lat + t * lw + lora;
      for (int64_t h = 0; h < H; ++h) {
        const float* src = kvb + t * kvb_w + h * (nope + vd);
        float* kh = kv + t * q_dim + h * hd;
        float* vh = kv + plane + t * q_dim + h * hd;
        std::memcpy(kh, src, static_cast<size_t>(nope) * sizeof(float));
        std::memcpy(kh + nope, kpe, static_cast<size_t>(rope) * sizeof(float));
        std::memcpy(vh, src + nope, static_cast<size_t>(vd) * sizeof(float));
        std::fill(vh + vd, vh + hd, 0.0f);
      }
    }
  });

  const int32_t token_indptr[2] = {0, n}, page_indptr[2] = {0, 1}, page_ids[1] = {0};
  float* out = grow(s.att_exp, static_cast<size_t>(n) * static_cast<size_t>(q_dim));
  kernels::PagedAttentionArgs a = base;
  a.q = q + static_cast<int64_t>(r0) * q_dim;
  a.q_stride = q_dim;
  a.out = out;
  a.out_stride = q_dim;
  a.kv = kv;
  a.kv_dtype = kernels::KvDtype::kF32;
  a.kv_planes = 2;
  a.page_size = L;
  a.n_heads = static_cast<int32_t>(H);
  a.n_kv_heads = static_cast<int32_t>(H);
  a.head_dim = static_cast<int32_t>(hd);
  a.n_seqs = 1;
  a.token_indptr = token_indptr;
  a.start_pos = base.start_pos + b;
  a.page_indptr = page_indptr;
  a.page_ids = page_ids;
  kernels::paged_attention(a, threads_.get(), isa_);
  for (int64_t t = 0; t < n; ++t) {  // each head's first vd outputs (the rest is V's padding)
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(att_v + (r0 + t) * H * vd + h * vd, out + t * q_dim + h * hd, static_cast<size_t>(vd) * sizeof(float));
    }
  }
}

}  // namespace tessera::worker
