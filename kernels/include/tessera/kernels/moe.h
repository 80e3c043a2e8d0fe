// Mixture-of-experts routing (Mixtral, Qwen2-MoE), computed as llama.cpp's build_moe_ffn does
// with softmax gating, so that both programs choose the same experts with the same weights.
//
// Per token t (row t of `logits`, n_experts router logits):
//   probs   = softmax(logits[t])   over every expert: exp(l - max) in f32, summed in double,
//             each times (float)(1 / sum) — ggml_soft_max's order;
//   ids     = the k experts of highest probability, most probable first (equal probabilities:
//             the lower index first);
//   weights = probs[ids]; with norm_weights divided by their sum (summed in double, as
//             ggml_sum_rows) — Mixtral's "softmax over the chosen k"; Qwen2-MoE keeps them as they are.
// DeepSeek-V3 routing: moe_route_sigmoid() below.
// Grouping: moe_group() lists the (token, slot) pairs expert by expert, so that a batched step
// reads each active expert's weights once for all of its tokens.
// Plain functions of their arguments: thread-safe, no allocation.
#pragma once

#include <cstdint>

namespace tessera::kernels {

// ids and weights: [n, k] (row t at t * k). Requires 1 <= k <= n_experts.
void moe_route(const float* logits, int64_t logits_stride, int64_t n, int32_t n_experts, int32_t k, bool norm_weights,
               int32_t* ids, float* weights);

// DeepSeek-V3's routing (Hugging Face DeepseekV3 MoEGate, topk_method "noaux_tc"; llama.cpp's
// build_moe_ffn with sigmoid gating and exp_probs_b when n_group is 1). Per token t:
//   scores  = sigmoid(logits[t]) = 1 / (1 + exp(-l)) in f32 (ggml_sigmoid);
//   choice  = scores + bias (bias: [n_experts], e_score_correction_bias; selection only; nullptr = 0);
//   groups  (n_group > 1): experts [g * n_experts / n_group, (g + 1) * n_experts / n_group) form
//           group g, scored by the sum of its two highest choice values; the topk_group best
//           groups are kept (equal scores: the lower group first), the others' experts excluded;
//   ids     = the k kept experts of highest choice value, highest first (equal: lower index first);
//   weights = scores[ids] (without the bias); with norm_weights divided by their sum (double).
// (routed_scaling_factor is the caller's: ModelConfig::expert_weights_scale.)
struct MoeSigmoidRouting {
  const float* bias = nullptr;
  int32_t n_group = 1;     // divides n_experts; n_experts / n_group >= 2 when > 1
  int32_t topk_group = 1;  // in [1, n_group]; k <= topk_group * n_experts / n_group
  bool norm_weights = true;
};
void moe_route_sigmoid(const float* logits, int64_t logits_stride, int64_t n, int32_t n_experts, int32_t k,
                       const MoeSigmoidRouting& routing, int32_t* ids, float* weights);

// Counting sort of the n * k pairs by expert: pair p = t * k + j (token t's j-th choice,
// ids[p]). Afterwards offsets[0..n_experts] are the prefix sums of the per-expert counts and
// order[offsets[e] .. offsets[e + 1]) holds the pairs routed to expert e in increasing p.
void moe_group(const int32_t* ids, int64_t n, int32_t k, int32_t n_experts, int32_t* offsets, int32_t* order);

// Qwen2-MoE's shared-expert gate as llama.cpp computes sigmoid there: silu(x) / x
// (x / (1 + exp(-x)) / x; 0.5 at x == 0, where that quotient is undefined).
float moe_shared_gate(float x);

}  // namespace tessera::kernels
