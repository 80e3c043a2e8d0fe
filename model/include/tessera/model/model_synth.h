// Deterministic random-weight GGUF models shaped like real ones (`tessera model synth`): the
// common file for speed comparisons with llama.cpp, which loads them too.
//
// Values: each tensor's f32 values come from a counter-based generator seeded by
// (seed, tensor name), so a tensor has the same values whatever the output dtype: matrices
// uniform with std 0.02, norm weights uniform in [0.95, 1.05], biases uniform with std 0.02.
// The dtype (any DType: f32, f16, bf16, q4_0 ... q6_k, iq4_nl, iq4_xs) applies to every 2-D
// weight (a "pure" file, like llama-quantize --pure); norms and biases stay f32. A mix
// (q3_k_m, q4_k_s, q4_k_m, q5_k_m) picks a type per tensor with llama.cpp's rules
// (llama-quant.cpp llama_tensor_get_type) for a dense, non-Falcon, non-70B model: the output
// head (or the tied token embedding) Q6_K; Q4_K_M/Q5_K_M give attn_v and ffn_down Q6_K in the
// "use_more_bits" layers (first and last eighth, every third between); Q4_K_S gives Q5_K to
// the first 4 attn_v and the first eighth of ffn_down; Q3_K_M gives Q5_K to the first 2 attn_v
// and the first 1/16 of ffn_down, Q4_K to the other attn_v, ffn_down and attn_output. With 8
// experts (Mixtral) attn_k and attn_v are Q8_0 and attn_output Q5_K (Q3_K_M, Q4_K_S, Q4_K_M), as
// llama.cpp's rules say; ffn_down covers the expert and shared-expert tensors.
// A matrix whose row length is not a multiple of its type's block falls back as in
// llama.cpp (q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0, q2_k/q3_k/iq4_xs -> iq4_nl), and to
// f32 when even that does not fit. Blocks are bit-identical to ggml's reference quantizers
// (common/quants.h), so llama.cpp loads the files and reads the same numbers.
// Family layouts as llama.cpp's converter writes them: phi3 fused attn_qkv and ffn_up (gate rows
// then up rows), no output head bias; gemma2 post_attention_norm / post_ffw_norm and its
// soft-capping and sliding-window keys; Llama 3 rope_freqs.weight; Mistral as "llama".
// Metadata: general.*, <arch>.* hyperparameters, general.alignment = 32, and a vocabulary:
// by default a synthetic SentencePiece "llama" vocab (<unk>, <s>, </s>, 256 <0xXX> byte
// tokens, then distinct pieces with scores), or a tokenizer.json's byte-level BPE ("gpt2").
// Stateless functions; safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/dtype.h"
#include "tessera/common/result.h"

namespace tessera {

struct SynthShape {
  std::string like;          // "smollm2-135m"
  std::string architecture;  // GGUF general.architecture: llama | qwen2 | qwen2moe | qwen3 | qwen3moe | gemma2 | phi3
  int32_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, context_length = 0;
  float rope_theta = 10000.0f, rms_eps = 1e-5f;
  bool tied = false;
  bool attn_bias = false;
  int32_t head_dim = 0;            // 0: dim / n_heads; else written as <arch>.attention.key_length/value_length
  float llama3_rope_factor = 0.0f; // > 0: a rope_freqs.weight tensor as convert_hf_to_gguf.py computes it
                                   // for rope_type "llama3" (low 1, high 4, original context 8192)
  int32_t sliding_window = 0;      // > 0: <arch>.attention.sliding_window
  float attn_softcap = 0.0f, final_softcap = 0.0f;  // > 0: gemma2 soft-capping keys
  float weight_std = 0.02f;        // std of the matrices' uniform values
  std::string family;              // what `model inspect` calls it: llama3, smollm2, qwen2.5, gemma2, phi3, mistral
  // Mixture of experts (> 0 experts): ffn_gate_inp (F32, as llama-quantize keeps it) and stacked
  // ffn_{gate,up,down}_exps; expert_hidden_dim 0 = hidden_dim (Mixtral); a shared expert
  // (ffn_*_shexp + ffn_gate_inp_shexp, F32) when shared_expert_hidden_dim > 0 (Qwen2-MoE).
  int32_t n_experts = 0, n_experts_used = 0, expert_hidden_dim = 0, shared_expert_hidden_dim = 0;
  // DeepSeek-V2 (`deepseek2`): multi-head latent attention (kv_lora_rank > 0; q_lora_rank 0 = a
  // plain attn_q as in V2-Lite), head_dim = nope + rope_dim, v_head_dim; n_dense_lead dense
  // layers; n_shared_experts ungated shared experts of expert_hidden_dim (one MLP of their sum);
  // expert_weights_scale; YaRN (yarn_factor > 0: factor, original context, log multiplier).
  int32_t kv_lora_rank = 0, q_lora_rank = 0, rope_dim = 0, v_head_dim = 0, n_dense_lead = 0, n_shared_experts = 0;
  float expert_weights_scale = 1.0f, yarn_factor = 0.0f, yarn_log_mul = 0.0f;
  int32_t yarn_orig_ctx = 0;
  // Phi-3 128k / Phi-3.5 LongRoPE (longrope_orig_ctx > 0): rope_factors_long/short.weight
  // (head_dim / 2 values each, long rising to 61, short to 3), rope.scaling.attn_factor as
  // convert_hf_to_gguf.py computes it and rope.scaling.original_context_length.
  int32_t longrope_orig_ctx = 0;
  // DeepSeek-V3 routing: sigmoid gating, a selection bias per MoE layer (exp_probs_b.bias),
  // renormalized weights; groups (expert_group_count / expert_group_used_count) when > 1.
  bool v3_routing = false;
  int32_t n_expert_groups = 1, n_expert_groups_used = 1;

  int32_t head_size() const { return head_dim > 0 ? head_dim : dim / n_heads; }
};

// The known shapes: each family's real shape and a "-reduced" one (2 layers, dim 256 or 192, a
// 1024-token vocabulary; Gemma 2 keeps 26 layers, the count llama.cpp requires; windows and caps
// small enough to act within 64 positions): smollm2-135m, llama3.2-1b, qwen2.5-0.5b, gemma2-2b,
// phi3-mini, mistral-7b, mixtral-8x7b, qwen2-moe-a2.7b (+ -reduced: Mixtral 8 experts top 2,
// Qwen2-MoE 16 experts of 256 top 4 + a shared expert of 512; qwen2-moe-a2.7b-mini and
// mixtral-8x7b-mini: benchmark sizes, 8 layers of dim 1024), qwen3-0.6b and qwen3-30b-a3b
// (+ -reduced: head_dim 128, Qwen3-MoE 16 experts of 256 top 8; qwen3-30b-a3b-mini), and the older llama-1b,
// stories260k, qwen2-0.5b. Lookup by name
// (kInvalidArgument listing the known names).
const std::vector<SynthShape>& synth_shapes();
Result<SynthShape> synth_shape(const std::string& like);

// A per-tensor type mix like llama.cpp's LLAMA_FTYPE_MOSTLY_* presets.
enum class SynthMix : uint8_t { kPure = 0, kQ3_K_M, kQ4_K_S, kQ4_K_M, kQ5_K_M };

struct SynthOptions {
  std::string like;
  DType dtype = DType::kF32;  // the type of every matrix (kPure), or the mix's base type
  SynthMix mix = SynthMix::kPure;
  std::string out_path;
  uint64_t seed = 0;
  std::string vocab_from;  // tokenizer.json (HF byte-level BPE), or "" for the synthetic SentencePiece vocab
  std::string chat_template;  // written as tokenizer.chat_template when not empty (a Jinja template)
};

// "--dtype" names: every DType name, then "q3_k_m", "q4_k_s", "q4_k_m", "q5_k_m".
std::vector<std::string> synth_dtype_names();
// Sets options->dtype and options->mix from a name; kInvalidArgument listing the names.
Status parse_synth_dtype(const std::string& name, SynthOptions* options);
// The type synth writes for a matrix (name "blk.<i>.attn_v.weight" etc., row length cols).
DType synth_tensor_type(const SynthOptions& options, const SynthShape& shape, const std::string& name, uint64_t cols);

// Writes the GGUF file. Errors: kInvalidArgument (unknown shape or dtype), kIoError,
// kCorruptFile (unreadable --vocab-from file), kOutOfRange (a token id beyond the shape's vocabulary).
Status synth_model(const SynthOptions& options);

}  // namespace tessera
