// The mixture-of-experts MLP of the CPU forward pass (see engine_impl.h, moe_ffn).
#include <algorithm>
#include <vector>

#include "engine_impl.h"
#include "tessera/kernels/activation.h"
#include "tessera/kernels/matmul.h"
#include "tessera/kernels/moe.h"
#include "tessera/common/half.h"
#include "tessera/kernels/ops.h"

namespace tessera::worker {
namespace {

// silu(gate) * up over `rows` rows of `cols`, in place into gate, on the SIMD path of `isa`
// (activation.h, as the dense MLP); rows in parallel when many.
void swiglu(float* gate, const float* up, int64_t rows, int64_t cols, kernels::ThreadPool* tp, kernels::Isa isa) {
  if (rows >= 4) {
    tp->parallel_for(rows, [&](int64_t r) { kernels::swiglu(gate + r * cols, cols, up + r * cols, cols, gate + r * cols, cols, 1, cols, isa); });
  } else {
    kernels::swiglu(gate, cols, up, cols, gate, cols, rows, cols, isa);
  }
}

// ggml's mul_mat_id (llama.cpp's expert matmuls) converts the activations to the weights'
// vec_dot type first: fp16 for F16 weights, bf16 for BF16 (its dense mul_mat keeps f32 where
// its sgemm path applies). Rounding the same rows the same way keeps the two programs' experts
// in agreement. The quantized types quantize their activations inside the matmul, as ggml does.
void round_like_mul_mat_id(DType w, float* x, int64_t n) {
  if (w == DType::kF16) {
    for (int64_t i = 0; i < n; ++i) x[i] = fp16_to_f32(f32_to_fp16(x[i]));
  } else if (w == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
  }
}

}  // namespace

void moe_ffn(const ModelConfig& c, const LayerWeights& w, const float* xn, int64_t T, float* out, MoeScratch& s,
             kernels::ThreadPool* tp, kernels::Isa isa,
             const std::function<const kernels::PackedWeights*(const Tensor&)>& packed) {
  const int64_t dim = c.dim, E = c.n_experts, K = c.n_experts_used, ff = c.expert_hidden_dim;
  const int64_t sh = c.shared_expert_hidden_dim, pairs = T * K;
  float* logits = grow(s.logits, static_cast<size_t>(T * E));
  float* weights = grow(s.weights, static_cast<size_t>(pairs));
  int32_t* ids = grow(s.ids, static_cast<size_t>(pairs));
  int32_t* offsets = grow(s.offsets, static_cast<size_t>(E + 1));
  int32_t* order = grow(s.order, static_cast<size_t>(pairs));
  int32_t* pair_row = grow(s.pair_row, static_cast<size_t>(pairs));
  float* xg = grow(s.xg, static_cast<size_t>(pairs * dim));
  float* gate = grow(s.gate, static_cast<size_t>(pairs * ff));
  float* up = grow(s.up, static_cast<size_t>(pairs * ff));
  float* down = grow(s.down, static_cast<size_t>(pairs * dim));
  float* sh_gate = sh > 0 ? grow(s.sh_gate, static_cast<size_t>(T * sh)) : nullptr;
  float* sh_up = sh > 0 ? grow(s.sh_up, static_cast<size_t>(T * sh)) : nullptr;
  float* sh_down = sh > 0 ? grow(s.sh_down, static_cast<size_t>(T * dim)) : nullptr;
  const bool sh_gated = sh > 0 && !w.ffn_gate_inp_shexp.empty();  // DeepSeek-V2's shared experts have no gate
  float* sh_logit = sh_gated ? grow(s.sh_logit, static_cast<size_t>(T)) : nullptr;

  // 1. Router logits, and the shared expert's gate/up and gate logit (same input, one region).
  std::vector<kernels::MatmulArgs>& list = s.list;
  list.clear();
  list.push_back(matmul_args(w.ffn_gate_inp, xn, dim, logits, E, T));
  if (sh > 0) {
    list.push_back(matmul_args(w.ffn_gate_shexp, xn, dim, sh_gate, sh, T, packed(w.ffn_gate_shexp)));
    list.push_back(matmul_args(w.ffn_up_shexp, xn, dim, sh_up, sh, T, packed(w.ffn_up_shexp)));
    if (sh_gated) list.push_back(matmul_args(w.ffn_gate_inp_shexp, xn, dim, sh_logit, 1, T));
  }
  kernels::matmul_batch(list, tp, isa);

  // 2. Routing, grouping, and the gathered input rows (expert by expert).
  if (c.expert_sigmoid) {  // DeepSeek-V3
    const kernels::MoeSigmoidRouting r{.bias = w.ffn_exp_probs_b.empty() ? nullptr : w.ffn_exp_probs_b.f32(),
                                       .n_group = c.n_expert_groups, .topk_group = c.n_expert_groups_used,
                                       .norm_weights = c.expert_weights_norm};
    kernels::moe_route_sigmoid(logits, E, T, static_cast<int32_t>(E), static_cast<int32_t>(K), r, ids, weights);
  } else {
    kernels::moe_route(logits, E, T, static_cast<int32_t>(E), static_cast<int32_t>(K), c.expert_weights_norm, ids, weights);
  }
  if (c.expert_weights_scale != 1.0f) {  // after the renormalization, as llama.cpp's ggml_scale
    for (int64_t i = 0; i < pairs; ++i) weights[i] *= c.expert_weights_scale;
  }
  kernels::moe_group(ids, T, static_cast<int32_t>(K), static_cast<int32_t>(E), offsets, order);
  for (int64_t r = 0; r < pairs; ++r) {
    const int32_t p = order[r];
    pair_row[p] = static_cast<int32_t>(r);
    const float* src = xn + (p / K) * dim;
    std::copy(src, src + dim, xg + r * dim);
  }

  round_like_mul_mat_id(w.ffn_gate_exps.dtype, xg, pairs * dim);  // gate and up share one dtype in practice
  // 3. Every active expert's gate and up projections in one region.
  list.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = offsets[e], n = offsets[e + 1] - r0;
    if (n == 0) continue;
    const Tensor eg = expert_matrix(w.ffn_gate_exps, E, e), eu = expert_matrix(w.ffn_up_exps, E, e);
    list.push_back(matmul_args(eg, xg + r0 * dim, dim, gate + r0 * ff, ff, n, packed(eg)));
    list.push_back(matmul_args(eu, xg + r0 * dim, dim, up + r0 * ff, ff, n, packed(eu)));
  }
  kernels::matmul_batch(list, tp, isa);
  swiglu(gate, up, pairs, ff, tp, isa);
  if (sh > 0) swiglu(sh_gate, sh_up, T, sh, tp, isa);
  round_like_mul_mat_id(w.ffn_down_exps.dtype, gate, pairs * ff);

  // 4. Down projections (experts and the shared one) in one region; the shared one, the
  // largest (every token), first, so that its tasks are not the last ones handed out.
  list.clear();
  if (sh > 0) list.push_back(matmul_args(w.ffn_down_shexp, sh_gate, sh, sh_down, dim, T, packed(w.ffn_down_shexp)));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = offsets[e], n = offsets[e + 1] - r0;
    if (n == 0) continue;
    const Tensor ed = expert_matrix(w.ffn_down_exps, E, e);
    list.push_back(matmul_args(ed, gate + r0 * ff, ff, down + r0 * dim, dim, n, packed(ed)));
  }
  kernels::matmul_batch(list, tp, isa);

  // 5. Per token: sum of weight * expert output in choice order, then the gated shared expert.
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * dim;
    for (int64_t j = 0; j < K; ++j) {
      const float wj = weights[t * K + j];
      const float* d = down + static_cast<int64_t>(pair_row[t * K + j]) * dim;
      if (j == 0) {
        for (int64_t i = 0; i < dim; ++i) o[i] = d[i] * wj;
      } else {
        for (int64_t i = 0; i < dim; ++i) o[i] += d[i] * wj;
      }
    }
    if (sh > 0) {
      const float* d = sh_down + t * dim;
      if (sh_gated) {
        const float g = kernels::moe_shared_gate(sh_logit[t]);
        for (int64_t i = 0; i < dim; ++i) o[i] += d[i] * g;
      } else {
        for (int64_t i = 0; i < dim; ++i) o[i] += d[i];
      }
    }
  }
}

}  // namespace tessera::worker
