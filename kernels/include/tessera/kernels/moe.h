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
// Grouping: moe_group() lists the (token, slot) pairs expert by expert, so that a batched step
// reads each active expert's weights once for all of its tokens.
// Plain functions of their arguments: thread-safe, no allocation.
#pragma once

#include <cstdint>

namespace tessera::kernels {

// ids and weights: [n, k] (row t at t * k). Requires 1 <= k <= n_experts.
void moe_route(const float* logits, int64_t logits_stride, int64_t n, int32_t n_experts, int32_t k, bool norm_weights,
               int32_t* ids, float* weights);

// Counting sort of the n * k pairs by expert: pair p = t * k + j (token t's j-th choice,
// ids[p]). Afterwards offsets[0..n_experts] are the prefix sums of the per-expert counts and
// order[offsets[e] .. offsets[e + 1]) holds the pairs routed to expert e in increasing p.
void moe_group(const int32_t* ids, int64_t n, int32_t k, int32_t n_experts, int32_t* offsets, int32_t* order);

// Qwen2-MoE's shared-expert gate as llama.cpp computes sigmoid there: silu(x) / x
// (x / (1 + exp(-x)) / x; 0.5 at x == 0, where that quotient is undefined).
float moe_shared_gate(float x);

}  // namespace tessera::kernels
