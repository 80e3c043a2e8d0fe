// config.json -> ModelConfig per family (hf_config.h).
#include "hf_config.h"

#include <cmath>

#include "synth.h"
#include "tessera/common/log.h"

namespace tessera::loaders {
namespace {

using nlohmann::json;

// DeepSeek-V2 / V2-Lite / V3 (`deepseek_v2`, `deepseek_v3`), as convert_hf_to_gguf.py maps them
// to llama.cpp's deepseek2 keys: latent attention (kv_lora_rank, q_lora_rank null for Lite,
// key = qk_nope_head_dim + qk_rope_head_dim, v_head_dim), RoPE on adjacent pairs (the HF code
// de-interleaves q_pe/k_pe before rotate_half, i.e. the weights are in NORM order, as llama.cpp
// reads them), first_k_dense_replace dense layers, then routed experts (softmax for V2, sigmoid
// with e_score_correction_bias and optional groups for V3's noaux_tc) and n_shared_experts
// ungated shared experts. routed_scaling_factor and norm_topk_prob are kept as the converter
// writes them (expert_weights_scale, expert_weights_norm): the released configs that
// renormalize (V3) also scale, as llama.cpp computes.
Status read_hf_deepseek(const HfConfig& cfg, ModelConfig& c, const std::string& config_path) {
  auto refuse = [&](const std::string& what) {
    return make_error(ErrorCode::kUnsupported, config_path + ": " + what + " is not supported");
  };
  auto wrong = [&](const std::string& what) { return make_error(ErrorCode::kCorruptFile, config_path + ": " + what); };
  c.architecture = "deepseek2";
  c.family = "deepseek2";
  c.rope_layout = RopeLayout::kInterleaved;
  TS_ASSIGN_OR_RETURN(c.kv_lora_rank, cfg.int32("kv_lora_rank"));
  TS_ASSIGN_OR_RETURN(c.q_lora_rank, cfg.int32("q_lora_rank", 0));
  TS_ASSIGN_OR_RETURN(const int32_t nope, cfg.int32("qk_nope_head_dim"));
  TS_ASSIGN_OR_RETURN(c.rope_dim, cfg.int32("qk_rope_head_dim"));
  TS_ASSIGN_OR_RETURN(c.v_head_dim, cfg.int32("v_head_dim"));
  if (c.kv_lora_rank <= 0 || c.kv_lora_rank > 65536) return wrong("kv_lora_rank is out of range [1, 65536]");
  if (c.q_lora_rank > 65536) return wrong("q_lora_rank is out of range [0, 65536]");
  if (nope <= 0 || nope > 4096 || c.rope_dim <= 0 || c.rope_dim > 4096 || c.rope_dim % 2 != 0) {
    return wrong("qk_nope_head_dim must be positive and qk_rope_head_dim positive and even");
  }
  c.head_dim = nope + c.rope_dim;
  if (c.v_head_dim <= 0 || c.v_head_dim > c.head_dim) {
    return refuse("v_head_dim " + std::to_string(c.v_head_dim) + " above the key length " + std::to_string(c.head_dim) +
                  " (the K/V cache pads V to the key length)");
  }
  c.n_kv_heads = c.n_heads;  // the decompressed K/V: one per head
  TS_ASSIGN_OR_RETURN(c.n_experts, cfg.int32("n_routed_experts"));
  TS_ASSIGN_OR_RETURN(c.n_experts_used, cfg.int32("num_experts_per_tok"));
  TS_ASSIGN_OR_RETURN(c.expert_hidden_dim, cfg.int32("moe_intermediate_size"));
  TS_ASSIGN_OR_RETURN(const int32_t shared, cfg.int32("n_shared_experts", 0));
  if (shared > 64) return wrong("n_shared_experts is out of range [0, 64]");
  c.shared_expert_hidden_dim = shared * c.expert_hidden_dim;
  TS_ASSIGN_OR_RETURN(c.n_dense_lead, cfg.int32("first_k_dense_replace", 0));
  if (c.n_dense_lead > c.n_layers) return wrong("first_k_dense_replace is above num_hidden_layers");
  TS_ASSIGN_OR_RETURN(const int32_t freq, cfg.int32("moe_layer_freq", 1));
  if (freq != 1) return refuse("moe_layer_freq " + std::to_string(freq) + " (MoE layers not every layer)");
  TS_ASSIGN_OR_RETURN(c.expert_weights_norm, cfg.boolean("norm_topk_prob", false));
  TS_ASSIGN_OR_RETURN(c.expert_weights_scale, cfg.real("routed_scaling_factor", 1.0f));
  if (!(std::isfinite(c.expert_weights_scale) && c.expert_weights_scale > 0.0f)) return wrong("routed_scaling_factor must be positive");
  std::string scoring = "softmax", method = "greedy";
  if (cfg.has("scoring_func")) {
    TS_ASSIGN_OR_RETURN(scoring, cfg.string("scoring_func"));
  }
  if (cfg.has("topk_method")) {
    TS_ASSIGN_OR_RETURN(method, cfg.string("topk_method"));
  }
  if (scoring != "softmax" && scoring != "sigmoid") return refuse("scoring_func '" + scoring + "'");
  c.expert_sigmoid = scoring == "sigmoid";
  TS_ASSIGN_OR_RETURN(c.n_expert_groups, cfg.int32("n_group", 1));
  TS_ASSIGN_OR_RETURN(c.n_expert_groups_used, cfg.int32("topk_group", c.n_expert_groups));
  if (method == "greedy") {
    c.n_expert_groups = c.n_expert_groups_used = 1;  // greedy ignores n_group
  } else if (method != "group_limited_greedy" && method != "noaux_tc") {
    return refuse("topk_method '" + method + "'");
  }
  if (c.n_experts <= 0 || c.n_experts > 4096) return wrong("n_routed_experts is out of range [1, 4096]");
  if (c.n_expert_groups < 1 || c.n_experts % c.n_expert_groups != 0 ||
      (c.n_expert_groups > 1 && c.n_experts / c.n_expert_groups < 2)) {
    return wrong("n_group " + std::to_string(c.n_expert_groups) + " does not split " + std::to_string(c.n_experts) +
                 " experts into groups of at least 2");
  }
  if (c.n_expert_groups_used < 1 || c.n_expert_groups_used > c.n_expert_groups ||
      c.n_experts_used > c.n_expert_groups_used * (c.n_experts / c.n_expert_groups)) {
    return wrong("topk_group " + std::to_string(c.n_expert_groups_used) + " of " + std::to_string(c.n_expert_groups) +
                 " groups cannot hold " + std::to_string(c.n_experts_used) + " chosen experts");
  }
  if (c.n_expert_groups > 1 && !c.expert_sigmoid) {
    return refuse("topk_method '" + method + "' with " + std::to_string(c.n_expert_groups) + " groups and softmax scores");
  }
  return ok_status();
}

// Gemma 2 (`gemma2`), as convert_hf_to_gguf.py maps it and transformers computes it: embeddings
// × sqrt(hidden_size), queries scaled by 1/sqrt(query_pre_attn_scalar), attention and final
// logits soft-capped, a sliding window on every other layer (the even ones), pre- and post-norms
// around attention and MLP whose weights are stored as w - 1 (the norm multiplies by 1 + w:
// fold_gemma_norms), GeGLU with the tanh GELU; tied embeddings.
Status read_hf_gemma2(const HfConfig& cfg, ModelConfig& c, const std::string& config_path) {
  c.architecture = "gemma2";
  c.family = "gemma2";
  // Gemma2Config's defaults: query_pre_attn_scalar 256, soft-caps 50 / 30 and a window of 4096
  // when a key is absent; null turns a soft-cap or the window off.
  TS_ASSIGN_OR_RETURN(const int32_t qpas, cfg.int32("query_pre_attn_scalar", 256));
  if (qpas <= 0) return make_error(ErrorCode::kCorruptFile, config_path + ": query_pre_attn_scalar must be positive");
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(qpas));
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  TS_ASSIGN_OR_RETURN(c.attn_softcap, cfg.real("attn_logit_softcapping", cfg.present("attn_logit_softcapping") ? 0.0f : 50.0f));
  TS_ASSIGN_OR_RETURN(c.final_softcap, cfg.real("final_logit_softcapping", cfg.present("final_logit_softcapping") ? 0.0f : 30.0f));
  TS_ASSIGN_OR_RETURN(c.sliding_window, cfg.int32("sliding_window", cfg.present("sliding_window") ? 0 : 4096));
  c.swa_every = 2;
  c.post_norms = true;
  TS_ASSIGN_OR_RETURN(const std::string act, cfg.first_string({"hidden_activation", "hidden_act"}, "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh") {
    return make_error(ErrorCode::kUnsupported, config_path + ": hidden_activation '" + act +
                                                   "' is not supported (gelu_pytorch_tanh)");
  }
  c.ffn_act = FfnActivation::kGeluTanh;
  for (float cap : {c.attn_softcap, c.final_softcap}) {
    if (!(std::isfinite(cap) && cap >= 0.0f)) {
      return make_error(ErrorCode::kCorruptFile, config_path + ": *_logit_softcapping must be a non-negative number");
    }
  }
  return ok_status();
}

// Phi-3 / Phi-3.5 (`phi3`): fused qkv_proj and gate_up_proj (row views, as from GGUF), a sliding
// window when the config has one, and LongRoPE (rope_scaling type longrope / su: long_factor and
// short_factor, head_dim / 2 each; original_max_position_embeddings) read as
// convert_hf_to_gguf.py writes it: the long factors when max_position_embeddings exceeds the
// original context (Tessera serves the whole context), attention factor
// sqrt(1 + ln(scale) / ln(original)).
Status read_hf_phi3(const json& cj, const HfConfig& cfg, ModelConfig& c, const std::string& config_path) {
  c.architecture = "phi3";
  c.family = "phi3";
  TS_ASSIGN_OR_RETURN(c.sliding_window, cfg.int32("sliding_window", 0));
  auto rs = cj.find("rope_scaling");
  if (rs == cj.end() || rs->is_null()) return ok_status();
  if (!rs->is_object()) return make_error(ErrorCode::kCorruptFile, config_path + ": key rope_scaling is not an object");
  const HfConfig r(*rs, config_path + " rope_scaling");
  TS_ASSIGN_OR_RETURN(const std::string type, r.first_string({"rope_type", "type"}, ""));
  if (type != "longrope" && type != "su") return ok_status();  // read_rope_scaling decides
  TS_ASSIGN_OR_RETURN(const int32_t orig, cfg.int32("original_max_position_embeddings"));
  if (orig < 2) return make_error(ErrorCode::kCorruptFile, config_path + ": original_max_position_embeddings must be at least 2");
  if (r.has("long_mscale") || r.has("short_mscale")) {
    return make_error(ErrorCode::kUnsupported, config_path + ": rope_scaling long_mscale / short_mscale (Phi-3-small) is not supported");
  }
  const bool long_factors = c.max_seq_len > orig;
  const char* key = long_factors ? "long_factor" : "short_factor";
  auto f = rs->find(key);
  for (const char* k : {"long_factor", "short_factor"}) {
    auto arr = rs->find(k);
    if (arr == rs->end() || !arr->is_array() || arr->size() != static_cast<size_t>(c.head_dim / 2)) {
      return make_error(ErrorCode::kCorruptFile, config_path + ": rope_scaling " + k + " must be an array of head_dim / 2 = " +
                                                     std::to_string(c.head_dim / 2) + " numbers");
    }
  }
  c.rope_freq_factors.clear();
  for (const json& v : *f) {
    if (!v.is_number() || !(v.get<double>() > 0.0) || !std::isfinite(v.get<double>())) {
      return make_error(ErrorCode::kCorruptFile, config_path + ": rope_scaling " + key + " holds a non-positive or non-numeric value");
    }
    c.rope_freq_factors.push_back(v.get<float>());
  }
  const double scale = static_cast<double>(c.max_seq_len) / orig;
  c.rope_attn_factor = scale > 1.0 ? static_cast<float>(std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(orig)))) : 1.0f;
  c.rope_longrope = true;
  c.rope_longrope_long = long_factors;
  return ok_status();
}

// Mixture-of-experts and Qwen3 settings of config.json, as the GGUF converter maps them:
// mixtral (num_local_experts, renormalized top-k, experts of intermediate_size), qwen2_moe
// (num_experts, moe_intermediate_size, a gated shared expert of shared_expert_intermediate_size),
// qwen3_moe (num_experts, moe_intermediate_size, norm_topk_prob), qwen3 (Q/K norms).
Status read_hf_moe(const HfConfig& cfg, ModelConfig& c, const std::string& model_type, const std::string& config_path) {
  if (model_type == "deepseek_v2" || model_type == "deepseek_v3") return read_hf_deepseek(cfg, c, config_path);
  if (model_type == "qwen3" || model_type == "qwen3_moe") c.qk_norm = true;
  if (model_type == "mixtral") {
    c.architecture = "llama";
    c.family = "mixtral";
    TS_ASSIGN_OR_RETURN(c.n_experts, cfg.int32("num_local_experts"));
    c.expert_hidden_dim = c.hidden_dim;
    c.expert_weights_norm = true;
  } else if (model_type == "qwen2_moe" || model_type == "qwen3_moe") {
    c.architecture = model_type == "qwen2_moe" ? "qwen2moe" : "qwen3moe";
    TS_ASSIGN_OR_RETURN(c.n_experts, cfg.int32("num_experts"));
    TS_ASSIGN_OR_RETURN(c.expert_hidden_dim, cfg.int32("moe_intermediate_size"));
    TS_ASSIGN_OR_RETURN(c.expert_weights_norm, cfg.boolean("norm_topk_prob", model_type == "qwen3_moe"));
    if (model_type == "qwen2_moe") {
      TS_ASSIGN_OR_RETURN(c.shared_expert_hidden_dim, cfg.int32("shared_expert_intermediate_size"));
    }
    TS_ASSIGN_OR_RETURN(int32_t step, cfg.int32("decoder_sparse_step", 1));
    if (step != 1 || (cfg.has("mlp_only_layers") && !cfg.empty_array("mlp_only_layers"))) {
      return make_error(ErrorCode::kUnsupported, config_path + ": dense layers between the MoE layers (decoder_sparse_step, "
                                                               "mlp_only_layers) are not supported");
    }
  } else {
    c.architecture = model_type == "qwen3" ? "qwen3" : model_type;
    return ok_status();
  }
  TS_ASSIGN_OR_RETURN(c.n_experts_used, cfg.int32("num_experts_per_tok"));
  return ok_status();
}

// DeepSeek's YaRN (DeepseekV2YarnRotaryEmbedding), as llama.cpp computes it: ggml's rope_yarn with
// beta_fast 32, beta_slow 1 over original_max_position_embeddings, and attention scaled by
// mscale^2 with mscale = 1 + 0.1 * mscale_all_dim * ln(factor) (yarn_log_multiplier). HF also
// multiplies cos/sin by yarn_mscale(mscale) / yarn_mscale(mscale_all_dim), which llama.cpp
// does not: only configs where that ratio is 1 (mscale == mscale_all_dim, as V2, V2-Lite and V3
// ship) are read; other betas are refused too.
Status read_deepseek_yarn(const HfConfig& r, ModelConfig& c, const std::string& config_path) {
  TS_ASSIGN_OR_RETURN(const float factor, r.real("factor", 0.0f));
  TS_ASSIGN_OR_RETURN(const int32_t orig, r.int32("original_max_position_embeddings"));
  TS_ASSIGN_OR_RETURN(const float beta_fast, r.real("beta_fast", 32.0f));
  TS_ASSIGN_OR_RETURN(const float beta_slow, r.real("beta_slow", 1.0f));
  TS_ASSIGN_OR_RETURN(const double mscale, r.real64("mscale", 1.0));
  TS_ASSIGN_OR_RETURN(const double mscale_all_dim, r.real64("mscale_all_dim", 0.0));
  if (!(std::isfinite(factor) && factor >= 1.0f) || orig <= 0) {
    return make_error(ErrorCode::kCorruptFile, config_path + ": rope_scaling yarn needs factor >= 1 and "
                                                             "original_max_position_embeddings > 0");
  }
  if (beta_fast != 32.0f || beta_slow != 1.0f || mscale != mscale_all_dim) {
    return make_error(ErrorCode::kUnsupported, config_path + ": rope_scaling yarn with beta_fast " + std::to_string(beta_fast) +
                                                   ", beta_slow " + std::to_string(beta_slow) + ", mscale " +
                                                   std::to_string(mscale) + " != mscale_all_dim " +
                                                   std::to_string(mscale_all_dim) +
                                                   " is not supported (32, 1 and mscale == mscale_all_dim are)");
  }
  c.rope_yarn = true;
  c.yarn_orig_ctx = orig;
  c.yarn_log_mul = static_cast<float>(0.1 * mscale_all_dim);  // convert_hf_to_gguf.py's yarn_log_multiplier
  c.rope_freq_scale = 1.0f / factor;
  return ok_status();
}

// transformers' _compute_yarn_parameters (Qwen2.5 / Qwen3 long context: {"type": "yarn", "factor",
// "original_max_position_embeddings"}), which is llama.cpp's rope_yarn for these families:
// ramp between the corrected dimensions of beta_fast 32 / beta_slow 1 (floor / ceil), cos and
// sin scaled by attention_factor = 0.1 ln(factor) + 1. Other betas, another attention factor or
// DeepSeek's mscale keys outside DeepSeek: refused by name.
Status read_yarn(const HfConfig& r, ModelConfig& c, const std::string& config_path) {
  TS_ASSIGN_OR_RETURN(const float factor, r.real("factor", 0.0f));
  TS_ASSIGN_OR_RETURN(const int32_t orig, r.int32("original_max_position_embeddings", c.max_seq_len));
  TS_ASSIGN_OR_RETURN(const double beta_fast, r.real64("beta_fast", 32.0));
  TS_ASSIGN_OR_RETURN(const double beta_slow, r.real64("beta_slow", 1.0));
  if (!(std::isfinite(factor) && factor >= 1.0f) || orig <= 0) {
    return make_error(ErrorCode::kCorruptFile, config_path + ": rope_scaling yarn needs factor >= 1 and "
                                                             "original_max_position_embeddings > 0");
  }
  const double default_attention = 0.1 * std::log(static_cast<double>(factor)) + 1.0;
  TS_ASSIGN_OR_RETURN(const double attention, r.real64("attention_factor", default_attention));
  TS_ASSIGN_OR_RETURN(const bool truncate, r.boolean("truncate", true));
  if (beta_fast != 32.0 || beta_slow != 1.0 || std::fabs(attention - default_attention) > 1e-6 || r.has("mscale") ||
      r.has("mscale_all_dim") || !truncate) {
    return make_error(ErrorCode::kUnsupported, config_path + ": rope_scaling yarn with other beta_fast/beta_slow than 32/1, "
                                                             "an attention_factor other than 0.1 ln(factor) + 1, mscale keys or "
                                                             "truncate false is not supported");
  }
  c.rope_yarn = true;
  c.yarn_orig_ctx = orig;
  c.rope_freq_scale = 1.0f / factor;
  return ok_status();
}

// config.json's rope_scaling, as transformers' ROPE_INIT_FUNCTIONS read it (`rope_type`, or
// `type` in older files): llama3 -> the per-frequency divisors convert_hf_to_gguf.py writes as
// rope_freqs.weight; linear -> positions / factor; yarn -> read_yarn / read_deepseek_yarn;
// default -> nothing; dynamic (NTK) changes the frequencies only past
// original_max_position_embeddings (= max_position_embeddings here) and is treated as none;
// anything else (longrope, ...) is refused by name rather than computed differently.
Status read_rope_scaling(const json& rs, ModelConfig& c, const std::string& config_path) {
  if (!rs.is_object()) return make_error(ErrorCode::kCorruptFile, config_path + ": key rope_scaling is not an object");
  const HfConfig r(rs, config_path + " rope_scaling");
  TS_ASSIGN_OR_RETURN(const std::string type, r.first_string({"rope_type", "type"}, "default"));
  if (type == "default") return ok_status();
  if (type == "dynamic") {
    TS_LOG(kInfo) << config_path << ": rope_scaling dynamic (NTK) changes nothing below max_position_embeddings ("
                  << c.max_seq_len << "), the longest context served";
    return ok_status();
  }
  if (type == "yarn") return c.is_mla() ? read_deepseek_yarn(r, c, config_path) : read_yarn(r, c, config_path);
  if (type != "llama3" && type != "linear") {
    return make_error(ErrorCode::kUnsupported, config_path + ": rope_scaling type '" + type +
                                                   "' is not supported (default, linear, llama3, dynamic, yarn)");
  }
  TS_ASSIGN_OR_RETURN(const float factor, r.real("factor", 0.0f));
  if (!(std::isfinite(factor) && factor >= 1.0f)) {
    return make_error(ErrorCode::kCorruptFile, config_path + ": rope_scaling factor must be a number >= 1");
  }
  if (type == "linear") {
    c.rope_freq_scale = 1.0f / factor;
    return ok_status();
  }
  TS_ASSIGN_OR_RETURN(const float low, r.real("low_freq_factor", 1.0f));
  TS_ASSIGN_OR_RETURN(const float high, r.real("high_freq_factor", 4.0f));
  TS_ASSIGN_OR_RETURN(const int32_t old_ctx, r.int32("original_max_position_embeddings", 8192));
  if (!(low > 0.0f && high > low && old_ctx > 0)) {
    return make_error(ErrorCode::kCorruptFile, config_path + ": rope_scaling llama3 needs 0 < low_freq_factor < "
                                                             "high_freq_factor and original_max_position_embeddings > 0");
  }
  c.rope_freq_factors = llama3_rope_factors(c.rope_theta, c.head_dim, factor, low, high, old_ctx);
  return ok_status();
}

}  // namespace

Status read_hf_family(const json& cj, const HfConfig& cfg, ModelConfig& c, const std::string& model_type,
                      const std::string& config_path) {
  TS_TRY(read_hf_moe(cfg, c, model_type, config_path));
  if (model_type == "gemma2") TS_TRY(read_hf_gemma2(cfg, c, config_path));
  if (model_type == "phi3") TS_TRY(read_hf_phi3(cj, cfg, c, config_path));
  const bool longrope = model_type == "phi3" && !c.rope_freq_factors.empty();  // read_hf_phi3 read rope_scaling
  if (auto rs = cj.find("rope_scaling"); rs != cj.end() && !rs->is_null() && !longrope) {
    TS_TRY(read_rope_scaling(*rs, c, config_path));
  }
  if (c.is_mla()) {  // as the GGUF loader: kq_scale = mscale^2 / sqrt(key_length)
    const float mscale = 1.0f + c.yarn_log_mul * std::log(1.0f / c.rope_freq_scale);
    c.attn_scale = mscale * mscale / std::sqrt(static_cast<float>(c.head_dim));
  }
  return ok_status();
}

}  // namespace tessera::loaders
