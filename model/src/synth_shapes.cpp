// The shapes `tessera model synth --like` knows (model_synth.h): each family's real shape and a
// reduced one.
#include "tessera/model/model_synth.h"

namespace tessera {

const std::vector<SynthShape>& synth_shapes() {
  static const std::vector<SynthShape> kShapes = [] {
    std::vector<SynthShape> v;
    auto add = [&](SynthShape s) { v.push_back(std::move(s)); };
    add({.like = "smollm2-135m", .architecture = "llama", .dim = 576, .hidden_dim = 1536, .n_layers = 30, .n_heads = 9,
         .n_kv_heads = 3, .vocab_size = 49152, .context_length = 8192, .rope_theta = 100000.0f, .tied = true,
         .family = "smollm2"});
    add({.like = "llama-1b", .architecture = "llama", .dim = 2048, .hidden_dim = 8192, .n_layers = 16, .n_heads = 32,
         .n_kv_heads = 8, .vocab_size = 128256, .context_length = 131072, .rope_theta = 500000.0f, .tied = true,
         .family = "llama3"});
    add({.like = "stories260k", .architecture = "llama", .dim = 64, .hidden_dim = 172, .n_layers = 5, .n_heads = 8,
         .n_kv_heads = 4, .vocab_size = 512, .context_length = 512, .tied = true, .family = "llama"});
    add({.like = "qwen2-0.5b", .architecture = "qwen2", .dim = 896, .hidden_dim = 4864, .n_layers = 24, .n_heads = 14,
         .n_kv_heads = 2, .vocab_size = 151936, .context_length = 32768, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
         .tied = true, .attn_bias = true, .family = "qwen2"});
    // The families' real shapes (Hugging Face config.json values).
    add({.like = "llama3.2-1b", .architecture = "llama", .dim = 2048, .hidden_dim = 8192, .n_layers = 16, .n_heads = 32,
         .n_kv_heads = 8, .vocab_size = 128256, .context_length = 131072, .rope_theta = 500000.0f, .tied = true,
         .llama3_rope_factor = 32.0f, .family = "llama3"});
    add({.like = "qwen2.5-0.5b", .architecture = "qwen2", .dim = 896, .hidden_dim = 4864, .n_layers = 24, .n_heads = 14,
         .n_kv_heads = 2, .vocab_size = 151936, .context_length = 32768, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
         .tied = true, .attn_bias = true, .family = "qwen2.5"});
    add({.like = "gemma2-2b", .architecture = "gemma2", .dim = 2304, .hidden_dim = 9216, .n_layers = 26, .n_heads = 8,
         .n_kv_heads = 4, .vocab_size = 256000, .context_length = 8192, .rms_eps = 1e-6f, .tied = true, .head_dim = 256,
         .sliding_window = 4096, .attn_softcap = 50.0f, .final_softcap = 30.0f, .family = "gemma2"});
    add({.like = "phi3-mini", .architecture = "phi3", .dim = 3072, .hidden_dim = 8192, .n_layers = 32, .n_heads = 32,
         .n_kv_heads = 32, .vocab_size = 32064, .context_length = 4096, .sliding_window = 2047, .family = "phi3"});
    add({.like = "mistral-7b", .architecture = "llama", .dim = 4096, .hidden_dim = 14336, .n_layers = 32, .n_heads = 32,
         .n_kv_heads = 8, .vocab_size = 32768, .context_length = 32768, .rope_theta = 1000000.0f, .family = "mistral"});
    // Reduced shapes: the same family features at test size. Matrices std 0.08 (peaked
    // distributions, so that agreement is measured on logits that matter).
    add({.like = "smollm2-135m-reduced", .architecture = "llama", .dim = 192, .hidden_dim = 512, .n_layers = 2,
         .n_heads = 3, .n_kv_heads = 1, .vocab_size = 1024, .context_length = 8192, .rope_theta = 100000.0f,
         .tied = true, .weight_std = 0.08f, .family = "smollm2"});
    add({.like = "llama3.2-1b-reduced", .architecture = "llama", .dim = 256, .hidden_dim = 768, .n_layers = 2,
         .n_heads = 4, .n_kv_heads = 2, .vocab_size = 1024, .context_length = 131072, .rope_theta = 500000.0f,
         .tied = true, .llama3_rope_factor = 32.0f, .weight_std = 0.08f, .family = "llama3"});
    add({.like = "qwen2.5-0.5b-reduced", .architecture = "qwen2", .dim = 256, .hidden_dim = 512, .n_layers = 2,
         .n_heads = 4, .n_kv_heads = 2, .vocab_size = 1024, .context_length = 32768, .rope_theta = 1000000.0f,
         .rms_eps = 1e-6f, .tied = true, .attn_bias = true, .weight_std = 0.08f, .family = "qwen2.5"});
    // Qwen2.5 with YaRN (the long-context setting: rope_scaling yarn, factor 4) on the reduced
    // shape; an original context of 512 puts the ramp among the faster rotations, so that the
    // 88 positions of the agreement test see it.
    add({.like = "qwen2.5-0.5b-yarn-reduced", .architecture = "qwen2", .dim = 256, .hidden_dim = 512, .n_layers = 2,
         .n_heads = 4, .n_kv_heads = 2, .vocab_size = 1024, .context_length = 32768, .rope_theta = 1000000.0f,
         .rms_eps = 1e-6f, .tied = true, .attn_bias = true, .weight_std = 0.08f, .family = "qwen2.5", .yarn_factor = 4.0f,
         .yarn_orig_ctx = 512});
    add({.like = "gemma2-2b-reduced", .architecture = "gemma2", .dim = 256, .hidden_dim = 256, .n_layers = 26,
         .n_heads = 4, .n_kv_heads = 2, .vocab_size = 1024, .context_length = 8192, .rms_eps = 1e-6f, .tied = true,
         .head_dim = 128, .sliding_window = 16, .attn_softcap = 1.0f, .final_softcap = 3.0f, .weight_std = 0.08f,
         .family = "gemma2"});
    add({.like = "phi3-mini-reduced", .architecture = "phi3", .dim = 256, .hidden_dim = 512, .n_layers = 2, .n_heads = 4,
         .n_kv_heads = 4, .vocab_size = 1024, .context_length = 4096, .sliding_window = 16, .weight_std = 0.08f,
         .family = "phi3"});
    // Phi-3.5-mini / Phi-3 128k: LongRoPE (long and short factors, attention factor) on the
    // reduced shape with Phi-3.5's window of 262144 (none in effect); an original context of
    // 128 makes both programs take the long factors (llama.cpp: when its context, 256 in the
    // agreement dumps, exceeds it).
    add({.like = "phi3-mini-128k-reduced", .architecture = "phi3", .dim = 256, .hidden_dim = 512, .n_layers = 2,
         .n_heads = 4, .n_kv_heads = 4, .vocab_size = 1024, .context_length = 131072, .sliding_window = 262144,
         .weight_std = 0.08f, .family = "phi3", .longrope_orig_ctx = 128});
    add({.like = "mistral-7b-reduced", .architecture = "llama", .dim = 256, .hidden_dim = 768, .n_layers = 2,
         .n_heads = 4, .n_kv_heads = 1, .vocab_size = 1024, .context_length = 32768, .rope_theta = 1000000.0f,
         .weight_std = 0.08f, .family = "mistral"});
    // Mixtures of experts. Mixtral 8x7B (written as `llama` with expert keys, as llama.cpp's
    // converter does; each expert has feed_forward_length) and Qwen1.5-MoE-A2.7B (`qwen2moe`:
    // 60 experts of 1408, top 4, a shared expert of 5632 with its sigmoid gate, Q/K/V biases).
    add({.like = "mixtral-8x7b", .architecture = "llama", .dim = 4096, .hidden_dim = 14336, .n_layers = 32,
         .n_heads = 32, .n_kv_heads = 8, .vocab_size = 32000, .context_length = 32768, .rope_theta = 1000000.0f,
         .family = "mixtral", .n_experts = 8, .n_experts_used = 2});
    add({.like = "qwen2-moe-a2.7b", .architecture = "qwen2moe", .dim = 2048, .hidden_dim = 5632, .n_layers = 24,
         .n_heads = 16, .n_kv_heads = 16, .vocab_size = 151936, .context_length = 8192, .rope_theta = 1000000.0f,
         .rms_eps = 1e-6f, .attn_bias = true, .family = "qwen2moe", .n_experts = 60, .n_experts_used = 4,
         .expert_hidden_dim = 1408, .shared_expert_hidden_dim = 5632});
    // A quarter-width, third-depth Qwen2-MoE for benchmarks (60 experts of 512, top 4, shared
    // expert of 2048, a 32000-token vocabulary; ~0.9 B parameters, ~0.17 B active per token).
    add({.like = "qwen2-moe-a2.7b-mini", .architecture = "qwen2moe", .dim = 1024, .hidden_dim = 2816, .n_layers = 8,
         .n_heads = 8, .n_kv_heads = 8, .vocab_size = 32000, .context_length = 8192, .rope_theta = 1000000.0f,
         .rms_eps = 1e-6f, .attn_bias = true, .family = "qwen2moe", .n_experts = 60, .n_experts_used = 4,
         .expert_hidden_dim = 512, .shared_expert_hidden_dim = 2048});
    // The same for Mixtral: 8 layers of dim 1024, 8 experts of 3584, top 2 (~0.8 B parameters).
    add({.like = "mixtral-8x7b-mini", .architecture = "llama", .dim = 1024, .hidden_dim = 3584, .n_layers = 8,
         .n_heads = 8, .n_kv_heads = 2, .vocab_size = 32000, .context_length = 32768, .rope_theta = 1000000.0f,
         .family = "mixtral", .n_experts = 8, .n_experts_used = 2});
    add({.like = "mixtral-8x7b-reduced", .architecture = "llama", .dim = 256, .hidden_dim = 512, .n_layers = 2,
         .n_heads = 4, .n_kv_heads = 2, .vocab_size = 1024, .context_length = 32768, .rope_theta = 1000000.0f,
         .weight_std = 0.08f, .family = "mixtral", .n_experts = 8, .n_experts_used = 2});
    add({.like = "qwen2-moe-a2.7b-reduced", .architecture = "qwen2moe", .dim = 256, .hidden_dim = 512, .n_layers = 2,
         .n_heads = 4, .n_kv_heads = 4, .vocab_size = 1024, .context_length = 8192, .rope_theta = 1000000.0f,
         .rms_eps = 1e-6f, .attn_bias = true, .weight_std = 0.08f, .family = "qwen2moe", .n_experts = 16,
         .n_experts_used = 4, .expert_hidden_dim = 256, .shared_expert_hidden_dim = 512});
    // Qwen3 (`qwen3`, dense) and Qwen3-MoE (`qwen3moe`): per-head Q/K RMSNorm, no biases,
    // head_dim 128 from key_length (not dim / heads); Qwen3-30B-A3B routes 128 experts of 768, top 8,
    // renormalized, no shared expert.
    add({.like = "qwen3-0.6b", .architecture = "qwen3", .dim = 1024, .hidden_dim = 3072, .n_layers = 28, .n_heads = 16,
         .n_kv_heads = 8, .vocab_size = 151936, .context_length = 40960, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
         .tied = true, .head_dim = 128, .family = "qwen3"});
    add({.like = "qwen3-30b-a3b", .architecture = "qwen3moe", .dim = 2048, .hidden_dim = 6144, .n_layers = 48,
         .n_heads = 32, .n_kv_heads = 4, .vocab_size = 151936, .context_length = 40960, .rope_theta = 1000000.0f,
         .rms_eps = 1e-6f, .head_dim = 128, .family = "qwen3moe", .n_experts = 128, .n_experts_used = 8,
         .expert_hidden_dim = 768});
    // Benchmark size: 8 layers of dim 1024, 128 experts of 256, top 8 (~0.9 B parameters).
    add({.like = "qwen3-30b-a3b-mini", .architecture = "qwen3moe", .dim = 1024, .hidden_dim = 3072, .n_layers = 8,
         .n_heads = 16, .n_kv_heads = 2, .vocab_size = 32000, .context_length = 40960, .rope_theta = 1000000.0f,
         .rms_eps = 1e-6f, .head_dim = 128, .family = "qwen3moe", .n_experts = 128, .n_experts_used = 8,
         .expert_hidden_dim = 256});
    add({.like = "qwen3-0.6b-reduced", .architecture = "qwen3", .dim = 256, .hidden_dim = 768, .n_layers = 2,
         .n_heads = 4, .n_kv_heads = 2, .vocab_size = 1024, .context_length = 40960, .rope_theta = 1000000.0f,
         .rms_eps = 1e-6f, .tied = true, .head_dim = 128, .weight_std = 0.08f, .family = "qwen3"});
    add({.like = "qwen3-30b-a3b-reduced", .architecture = "qwen3moe", .dim = 256, .hidden_dim = 768, .n_layers = 2,
         .n_heads = 4, .n_kv_heads = 2, .vocab_size = 1024, .context_length = 40960, .rope_theta = 1000000.0f,
         .rms_eps = 1e-6f, .head_dim = 128, .weight_std = 0.08f, .family = "qwen3moe", .n_experts = 16,
         .n_experts_used = 8, .expert_hidden_dim = 256});
    // DeepSeek-V2-Lite (`deepseek2`): multi-head latent attention (kv_lora_rank 512, no q LoRA,
    // heads of 128 + 64 rope dims, V of 128), YaRN (factor 40 over 4096), one dense layer, then
    // 64 experts of 1408, top 6, 2 shared; llama.cpp takes the Lite path for 27 layers only.
    add({.like = "deepseek-v2-lite", .architecture = "deepseek2", .dim = 2048, .hidden_dim = 10944, .n_layers = 27,
         .n_heads = 16, .n_kv_heads = 16, .vocab_size = 102400, .context_length = 163840, .rms_eps = 1e-6f,
         .head_dim = 192, .family = "deepseek2", .n_experts = 64, .n_experts_used = 6, .expert_hidden_dim = 1408,
         .kv_lora_rank = 512, .rope_dim = 64, .v_head_dim = 128, .n_dense_lead = 1, .n_shared_experts = 2,
         .yarn_factor = 40.0f, .yarn_log_mul = 0.0707f, .yarn_orig_ctx = 4096});
    // Benchmark size (the Lite path needs 27 layers): dim 1024, 8 heads of 128 + 64 rope dims,
    // V of 128, latent 512, one dense layer of 2816, then 32 experts of 256, top 6, 2 shared
    // (~0.9 B parameters).
    add({.like = "deepseek-v2-lite-mini", .architecture = "deepseek2", .dim = 1024, .hidden_dim = 2816, .n_layers = 27,
         .n_heads = 8, .n_kv_heads = 8, .vocab_size = 32000, .context_length = 163840, .rms_eps = 1e-6f,
         .head_dim = 192, .family = "deepseek2", .n_experts = 32, .n_experts_used = 6, .expert_hidden_dim = 256,
         .kv_lora_rank = 512, .rope_dim = 64, .v_head_dim = 128, .n_dense_lead = 1, .n_shared_experts = 2,
         .yarn_factor = 40.0f, .yarn_log_mul = 0.0707f, .yarn_orig_ctx = 4096});
    // Test sizes: 27 layers of dim 256 (the Lite path), 8 heads of 48 + 16 rope dims, V of 32
    // (padded in the cache), latent 256, 4 experts of 256 top 2 + 1 shared; and the full-V2 path
    // (a q LoRA of 256) in 2 layers.
    add({.like = "deepseek-v2-lite-reduced", .architecture = "deepseek2", .dim = 256, .hidden_dim = 512, .n_layers = 27,
         .n_heads = 8, .n_kv_heads = 8, .vocab_size = 1024, .context_length = 163840, .rms_eps = 1e-6f, .head_dim = 64,
         .weight_std = 0.08f, .family = "deepseek2", .n_experts = 4, .n_experts_used = 2, .expert_hidden_dim = 256,
         .kv_lora_rank = 256, .rope_dim = 16, .v_head_dim = 32, .n_dense_lead = 1, .n_shared_experts = 1,
         .yarn_factor = 40.0f, .yarn_log_mul = 0.0707f, .yarn_orig_ctx = 4096});
    add({.like = "deepseek-v2-reduced", .architecture = "deepseek2", .dim = 256, .hidden_dim = 512, .n_layers = 2,
         .n_heads = 8, .n_kv_heads = 8, .vocab_size = 1024, .context_length = 163840, .rms_eps = 1e-6f, .head_dim = 64,
         .weight_std = 0.08f, .family = "deepseek2", .n_experts = 8, .n_experts_used = 2, .expert_hidden_dim = 256,
         .kv_lora_rank = 256, .q_lora_rank = 256, .rope_dim = 16, .v_head_dim = 32, .n_dense_lead = 1,
         .n_shared_experts = 2, .expert_weights_scale = 1.5f, .yarn_factor = 40.0f, .yarn_log_mul = 0.0707f,
         .yarn_orig_ctx = 4096});
    // DeepSeek-V3's routing on the full-V2 test shape: sigmoid scores with a selection bias,
    // renormalized, x 2.5; -grouped adds 4 groups of 2 experts, the 2 best kept (llama.cpp
    // c392e5094 does not read the group keys: the ungrouped shape is its comparison).
    add({.like = "deepseek-v3-reduced", .architecture = "deepseek2", .dim = 256, .hidden_dim = 512, .n_layers = 2,
         .n_heads = 8, .n_kv_heads = 8, .vocab_size = 1024, .context_length = 163840, .rms_eps = 1e-6f, .head_dim = 64,
         .weight_std = 0.08f, .family = "deepseek2", .n_experts = 8, .n_experts_used = 2, .expert_hidden_dim = 256,
         .kv_lora_rank = 256, .q_lora_rank = 256, .rope_dim = 16, .v_head_dim = 32, .n_dense_lead = 1,
         .n_shared_experts = 1, .expert_weights_scale = 2.5f, .yarn_factor = 40.0f, .yarn_log_mul = 0.1f,
         .yarn_orig_ctx = 4096, .v3_routing = true});
    add({.like = "deepseek-v3-grouped-reduced", .architecture = "deepseek2", .dim = 256, .hidden_dim = 512, .n_layers = 2,
         .n_heads = 8, .n_kv_heads = 8, .vocab_size = 1024, .context_length = 163840, .rms_eps = 1e-6f, .head_dim = 64,
         .weight_std = 0.08f, .family = "deepseek2", .n_experts = 8, .n_experts_used = 2, .expert_hidden_dim = 256,
         .kv_lora_rank = 256, .q_lora_rank = 256, .rope_dim = 16, .v_head_dim = 32, .n_dense_lead = 1,
         .n_shared_experts = 1, .expert_weights_scale = 2.5f, .yarn_factor = 40.0f, .yarn_log_mul = 0.1f,
         .yarn_orig_ctx = 4096, .v3_routing = true, .n_expert_groups = 4, .n_expert_groups_used = 2});
    return v;
  }();
  return kShapes;
}

Result<SynthShape> synth_shape(const std::string& like) {
  std::string names;
  for (const SynthShape& s : synth_shapes()) {
    if (s.like == like) return s;
    names += (names.empty() ? "" : ", ") + s.like;
  }
  return make_error(ErrorCode::kInvalidArgument, "unknown model shape '" + like + "' (known: " + names + ")");
}

}  // namespace tessera
