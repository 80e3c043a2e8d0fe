// The oracle forward pass: one sequence, contiguous K/V, plain loops, f32 math, every weight
// dequantized to f32 first. Slow on purpose; used by tests only.
#include <algorithm>
#include <cmath>
#include <string>

#include "engine_impl.h"
#include "tessera/kernels/ops.h"

namespace tessera::worker {
namespace {

std::vector<float> dequant(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.rows * t.cols));
  const size_t rb = dtype_row_bytes(t.dtype, t.cols);
  for (int64_t r = 0; r < t.rows; ++r) {
    kernels::dequantize_row(t.dtype, static_cast<const uint8_t*>(t.data) + static_cast<size_t>(r) * rb,
                            out.data() + r * t.cols, t.cols);
  }
  return out;
}

// out[r] = sum_c w[r, c] * in[c]
void matvec(const std::vector<float>& w, int64_t rows, int64_t cols, const float* in, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    float acc = 0.0f;
    for (int64_t c = 0; c < cols; ++c) acc += w[static_cast<size_t>(r * cols + c)] * in[c];
    out[r] = acc;
  }
}

void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void rotate(float* v, int64_t hd, int32_t pos, const ModelConfig& cfg, bool interleaved) {
  for (int64_t i = 0; i < hd / 2; ++i) {
    double ang = pos * std::pow(static_cast<double>(cfg.rope_theta), -2.0 * static_cast<double>(i) / static_cast<double>(hd));
    if (!cfg.rope_freq_factors.empty()) ang /= static_cast<double>(cfg.rope_freq_factors[static_cast<size_t>(i)]);
    ang *= static_cast<double>(cfg.rope_freq_scale);
    const float c = static_cast<float>(std::cos(ang)) * cfg.rope_attn_factor, s = static_cast<float>(std::sin(ang)) * cfg.rope_attn_factor;
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + hd / 2;
    const float v0 = v[a], v1 = v[b];
    v[a] = v0 * c - v1 * s;
    v[b] = v0 * s + v1 * c;
  }
}

struct MoeWeights {
  std::vector<float> router, gate, up, down, sh_router, sh_gate, sh_up, sh_down;
  static MoeWeights of(const LayerWeights& w) {
    MoeWeights m{dequant(w.ffn_gate_inp), dequant(w.ffn_gate_exps), dequant(w.ffn_up_exps), dequant(w.ffn_down_exps),
                 {}, {}, {}, {}};
    if (!w.ffn_gate_shexp.empty()) {
      m.sh_router = dequant(w.ffn_gate_inp_shexp);
      m.sh_gate = dequant(w.ffn_gate_shexp);
      m.sh_up = dequant(w.ffn_up_shexp);
      m.sh_down = dequant(w.ffn_down_shexp);
    }
    return m;
  }
};

// out = SwiGLU MLP of xn with [ff, dim] gate/up and [dim, ff] down matrices at the given offsets.
void swiglu_mlp(const float* wg, const float* wu, const float* wd, int64_t ff, int64_t dim, const float* xn, float* out) {
  std::vector<float> g(static_cast<size_t>(ff));
  for (int64_t r = 0; r < ff; ++r) {
    float a = 0.0f, b = 0.0f;
    for (int64_t i = 0; i < dim; ++i) {
      a += wg[r * dim + i] * xn[i];
      b += wu[r * dim + i] * xn[i];
    }
    g[static_cast<size_t>(r)] = a / (1.0f + std::exp(-a)) * b;
  }
  for (int64_t r = 0; r < dim; ++r) {
    float acc = 0.0f;
    for (int64_t i = 0; i < ff; ++i) acc += wd[r * ff + i] * g[static_cast<size_t>(i)];
    out[r] = acc;
  }
}

// The mixture-of-experts MLP of one token, written out plainly: a full softmax over the
// experts in double, a sort for the top k, the expert MLPs one by one, the shared expert with a
// true sigmoid gate.
void moe_mlp(const ModelConfig& c, const MoeWeights& m, const float* xn, float* out) {
  const int64_t E = c.n_experts, dim = c.dim, ff = c.expert_hidden_dim, sh = c.shared_expert_hidden_dim;
  std::vector<double> p(static_cast<size_t>(E));
  double mx = -INFINITY, z = 0.0;
  for (int64_t e = 0; e < E; ++e) {
    double l = 0.0;
    for (int64_t i = 0; i < dim; ++i) l += static_cast<double>(m.router[static_cast<size_t>(e * dim + i)]) * xn[i];
    p[static_cast<size_t>(e)] = l;
    mx = std::max(mx, l);
  }
  for (double& v : p) z += (v = std::exp(v - mx));
  for (double& v : p) v /= z;
  std::vector<int64_t> ids(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) ids[static_cast<size_t>(e)] = e;
  std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]; });
  ids.resize(static_cast<size_t>(c.n_experts_used));
  double wsum = 0.0;
  for (int64_t e : ids) wsum += p[static_cast<size_t>(e)];
  std::vector<float> y(static_cast<size_t>(dim));
  std::fill_n(out, dim, 0.0f);
  for (int64_t e : ids) {
    const double wt = c.expert_weights_norm ? p[static_cast<size_t>(e)] / wsum : p[static_cast<size_t>(e)];
    swiglu_mlp(m.gate.data() + e * ff * dim, m.up.data() + e * ff * dim, m.down.data() + e * dim * ff, ff, dim, xn, y.data());
    for (int64_t i = 0; i < dim; ++i) out[i] += static_cast<float>(wt) * y[static_cast<size_t>(i)];
  }
  if (sh > 0) {
    double l = 0.0;
    for (int64_t i = 0; i < dim; ++i) l += static_cast<double>(m.sh_router[static_cast<size_t>(i)]) * xn[i];
    const auto gate = static_cast<float>(1.0 / (1.0 + std::exp(-l)));
    swiglu_mlp(m.sh_gate.data(), m.sh_up.data(), m.sh_down.data(), sh, dim, xn, y.data());
    for (int64_t i = 0; i < dim; ++i) out[i] += gate * y[static_cast<size_t>(i)];
  }
}

}  // namespace

Result<std::vector<float>> reference_forward(const Model& model, std::span<const int32_t> tokens, std::vector<float>* queries) {
  TS_TRY(check_model(model));
  const ModelConfig& c = model.config();
  if (c.is_mla() || c.n_dense_lead > 0 || c.expert_weights_scale != 1.0f) {  // checked against llama.cpp only
    return make_error(ErrorCode::kUnsupported, "reference_forward: DeepSeek-V2 (latent attention) is not implemented");
  }
  if (c.rope_yarn) return make_error(ErrorCode::kUnsupported, "reference_forward: YaRN RoPE scaling is not implemented");
  for (int32_t t : tokens) {
    if (t < 0 || t >= c.vocab_size) return make_error(ErrorCode::kOutOfRange, "reference_forward: token " + std::to_string(t));
  }
  const int64_t n = static_cast<int64_t>(tokens.size()), dim = c.dim, hd = c.head_dim, hidden = c.hidden_dim;
  const int64_t q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  const int32_t group = c.n_heads / c.n_kv_heads;
  const bool interleaved = c.rope_layout == RopeLayout::kInterleaved;
  const std::vector<float> emb = dequant(model.tok_embeddings), out_w = dequant(model.output);

  std::vector<float> x(static_cast<size_t>(n * dim));
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(emb.data() + tokens[static_cast<size_t>(t)] * dim, dim, x.data() + t * dim);
    for (int64_t i = 0; i < dim; ++i) x[static_cast<size_t>(t * dim + i)] *= c.embedding_scale;
  }
  const float att_scale = c.attn_scale > 0.0f ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> kc(static_cast<size_t>(n * kv_dim)), vc(static_cast<size_t>(n * kv_dim));
  std::vector<float> xn(static_cast<size_t>(dim)), q(static_cast<size_t>(q_dim)), att(static_cast<size_t>(q_dim)),
      o(static_cast<size_t>(dim)), g(static_cast<size_t>(hidden)), u(static_cast<size_t>(hidden)), sc(static_cast<size_t>(n));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model.layers[static_cast<size_t>(l)];
    const auto wq = dequant(w.wq), wk = dequant(w.wk), wv = dequant(w.wv), wo = dequant(w.wo);
    const auto wg = dequant(w.w_gate), wu = dequant(w.w_up), wd = dequant(w.w_down);
    const MoeWeights moe = c.is_moe() ? MoeWeights::of(w) : MoeWeights{};
    // Each position in order: K/V of position t are cached before t attends.
    for (int64_t t = 0; t < n; ++t) {
      float* xt = x.data() + t * dim;
      rmsnorm(xt, w.attn_norm.f32(), xn.data(), dim, c.rms_eps);
      matvec(wq, q_dim, dim, xn.data(), q.data());
      matvec(wk, kv_dim, dim, xn.data(), kc.data() + t * kv_dim);
      matvec(wv, kv_dim, dim, xn.data(), vc.data() + t * kv_dim);
      if (c.attn_bias) {
        for (int64_t i = 0; i < q_dim; ++i) q[static_cast<size_t>(i)] += w.bq.f32()[i];
        for (int64_t i = 0; i < kv_dim; ++i) {
          kc[static_cast<size_t>(t * kv_dim + i)] += w.bk.f32()[i];
          vc[static_cast<size_t>(t * kv_dim + i)] += w.bv.f32()[i];
        }
      }
      if (c.qk_norm) {
        for (int32_t h = 0; h < c.n_heads; ++h) rmsnorm(q.data() + h * hd, w.attn_q_norm.f32(), q.data() + h * hd, hd, c.rms_eps);
        for (int32_t h = 0; h < c.n_kv_heads; ++h) {
          float* kh = kc.data() + t * kv_dim + h * hd;
          rmsnorm(kh, w.attn_k_norm.f32(), kh, hd, c.rms_eps);
        }
      }
      for (int32_t h = 0; h < c.n_heads; ++h) rotate(q.data() + h * hd, hd, static_cast<int32_t>(t), c, interleaved);
      if (queries != nullptr) {
        queries->resize(static_cast<size_t>(c.n_layers * n * q_dim));
        std::copy(q.begin(), q.end(), queries->begin() + (l * n + t) * q_dim);
      }
      for (int32_t h = 0; h < c.n_kv_heads; ++h) {
        rotate(kc.data() + t * kv_dim + h * hd, hd, static_cast<int32_t>(t), c, interleaved);
      }
      for (int32_t h = 0; h < c.n_heads; ++h) {
        const int64_t kvh = h / group;
        // Keys [p0, t]: all of them, or the last `sliding_window` on a sliding-window layer.
        const int64_t p0 = c.layer_uses_swa(l) ? std::max<int64_t>(0, t - c.sliding_window + 1) : 0;
        float mx = -INFINITY;
        for (int64_t p = p0; p <= t; ++p) {
          float d = 0.0f;
          for (int64_t i = 0; i < hd; ++i) d += q[static_cast<size_t>(h * hd + i)] * kc[static_cast<size_t>(p * kv_dim + kvh * hd + i)];
          d *= att_scale;
          if (c.attn_softcap > 0.0f) d = c.attn_softcap * std::tanh(d / c.attn_softcap);
          sc[static_cast<size_t>(p)] = d;
          mx = std::max(mx, sc[static_cast<size_t>(p)]);
        }
        float z = 0.0f;
        for (int64_t p = p0; p <= t; ++p) z += (sc[static_cast<size_t>(p)] = std::exp(sc[static_cast<size_t>(p)] - mx));
        for (int64_t i = 0; i < hd; ++i) {
          float acc = 0.0f;
          for (int64_t p = p0; p <= t; ++p) acc += sc[static_cast<size_t>(p)] * vc[static_cast<size_t>(p * kv_dim + kvh * hd + i)];
          att[static_cast<size_t>(h * hd + i)] = acc / z;
        }
      }
      matvec(wo, dim, q_dim, att.data(), o.data());
      if (c.post_norms) rmsnorm(o.data(), w.attn_post_norm.f32(), o.data(), dim, c.rms_eps);
      for (int64_t i = 0; i < dim; ++i) xt[i] += o[static_cast<size_t>(i)];
      rmsnorm(xt, w.ffn_norm.f32(), xn.data(), dim, c.rms_eps);
      if (c.is_moe()) {
        moe_mlp(c, moe, xn.data(), o.data());
        for (int64_t i = 0; i < dim; ++i) xt[i] += o[static_cast<size_t>(i)];
        continue;
      }
      matvec(wg, hidden, dim, xn.data(), g.data());
      matvec(wu, hidden, dim, xn.data(), u.data());
      for (int64_t i = 0; i < hidden; ++i) {
        const float gi = g[static_cast<size_t>(i)];
        const float act = c.ffn_act == FfnActivation::kGeluTanh
                              ? 0.5f * gi * (1.0f + std::tanh(0.7978845608f * (gi + 0.044715f * gi * gi * gi)))
                              : gi / (1.0f + std::exp(-gi));
        g[static_cast<size_t>(i)] = act * u[static_cast<size_t>(i)];
      }
      matvec(wd, dim, hidden, g.data(), o.data());
      if (c.post_norms) rmsnorm(o.data(), w.ffn_post_norm.f32(), o.data(), dim, c.rms_eps);
      for (int64_t i = 0; i < dim; ++i) xt[i] += o[static_cast<size_t>(i)];
    }
  }
  std::vector<float> logits(static_cast<size_t>(n * c.vocab_size));
  for (int64_t t = 0; t < n; ++t) {
    rmsnorm(x.data() + t * dim, model.final_norm.f32(), xn.data(), dim, c.rms_eps);
    float* row = logits.data() + t * c.vocab_size;
    matvec(out_w, c.vocab_size, dim, xn.data(), row);
    if (c.final_softcap > 0.0f) {
      for (int64_t i = 0; i < c.vocab_size; ++i) row[i] = c.final_softcap * std::tanh(row[i] / c.final_softcap);
    }
  }
  return logits;
}

}  // namespace tessera::worker
