// GGUF -> Model: architecture metadata (llama, mistral, qwen2, qwen2moe, qwen3, qwen3moe, deepseek2, gemma2, phi3) with each family's
// features (docs/models.md, "Model families"), tensors by their GGUF names,
// and the embedded tokenizer.ggml.* vocabulary.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include "gguf.h"
#include "loaded_model.h"
#include "tessera/common/log.h"

namespace tessera::loaders {
namespace {

class Meta {
 public:
  explicit Meta(const GgufFile& g) : g_(g) {}
  const GgufFile& file() const { return g_; }

  Error missing(const std::string& key) const {
    return make_error(ErrorCode::kCorruptFile, g_.path + ": GGUF metadata key " + key + " is missing");
  }
  Error wrong(const std::string& key, const std::string& what) const {
    return make_error(ErrorCode::kCorruptFile, g_.path + ": GGUF metadata key " + key + " " + what);
  }

  Result<int32_t> int32(const std::string& key, std::optional<int32_t> fallback = std::nullopt) const {
    const GgufValue* v = g_.find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return missing(key);
    }
    if (!v->is_integer() || v->type == GgufType::kBool) {
      return wrong(key, std::string("has type ") + gguf_type_name(v->type) + ", expected an integer");
    }
    if (v->type == GgufType::kU64 ? v->u > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
                                  : (v->i < std::numeric_limits<int32_t>::min() || v->i > std::numeric_limits<int32_t>::max())) {
      return wrong(key, "= " + std::to_string(v->i) + " does not fit in 32 bits");
    }
    return static_cast<int32_t>(v->i);
  }

  Result<float> real(const std::string& key, float fallback) const {
    const GgufValue* v = g_.find(key);
    if (v == nullptr) return fallback;
    if (v->is_float()) return static_cast<float>(v->f);
    if (v->is_integer() && v->type != GgufType::kBool) return static_cast<float>(v->i);
    return wrong(key, std::string("has type ") + gguf_type_name(v->type) + ", expected a number");
  }

  Result<bool> boolean(const std::string& key, bool fallback) const {
    const GgufValue* v = g_.find(key);
    if (v == nullptr) return fallback;
    if (v->type != GgufType::kBool) return wrong(key, std::string("has type ") + gguf_type_name(v->type) + ", expected bool");
    return v->i != 0;
  }

  Result<std::string> string(const std::string& key, std::optional<std::string> fallback = std::nullopt) const {
    const GgufValue* v = g_.find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return missing(key);
    }
    if (v->type != GgufType::kString) return wrong(key, std::string("has type ") + gguf_type_name(v->type) + ", expected string");
    return v->str;
  }

  // An array of the given element kind; nullptr when absent.
  Result<const GgufValue*> array(const std::string& key, bool want_strings, bool want_numbers) const {
    const GgufValue* v = g_.find(key);
    if (v == nullptr) return static_cast<const GgufValue*>(nullptr);
    const bool is_str = v->type == GgufType::kArray && v->elem == GgufType::kString;
    const bool is_num = v->type == GgufType::kArray && v->elem != GgufType::kString && v->elem != GgufType::kArray;
    if ((want_strings && !is_str) || (want_numbers && !is_num)) {
      return wrong(key, std::string("has type ") + gguf_type_name(v->type) +
                            (v->type == GgufType::kArray ? std::string(" of ") + gguf_type_name(v->elem) : "") +
                            (want_strings ? ", expected an array of strings" : ", expected an array of numbers"));
    }
    return v;
  }

 private:
  const GgufFile& g_;
};

Status load_vocab(const Meta& m, VocabSpec& v, int32_t n_vocab_rows, const std::string& path) {
  TS_ASSIGN_OR_RETURN(const GgufValue* tokens, m.array("tokenizer.ggml.tokens", true, false));
  if (tokens == nullptr) return ok_status();  // no embedded vocabulary
  TS_ASSIGN_OR_RETURN(v.model, m.string("tokenizer.ggml.model"));
  TS_ASSIGN_OR_RETURN(v.pre, m.string("tokenizer.ggml.pre", std::string()));
  v.tokens = tokens->strings;
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  if (n > n_vocab_rows) {
    return make_error(ErrorCode::kCorruptFile, path + ": GGUF tokenizer.ggml.tokens has " + std::to_string(n) +
                                                   " tokens but token_embd.weight only " + std::to_string(n_vocab_rows) + " rows");
  }
  TS_ASSIGN_OR_RETURN(const GgufValue* scores, m.array("tokenizer.ggml.scores", false, true));
  if (scores != nullptr) {
    if (static_cast<int64_t>(scores->array_size()) != n) {
      return m.wrong("tokenizer.ggml.scores", "has " + std::to_string(scores->array_size()) + " entries for " +
                                                  std::to_string(n) + " tokens");
    }
    v.scores.reserve(scores->array_size());
    for (double s : scores->floats) v.scores.push_back(static_cast<float>(s));
    for (int64_t s : scores->ints) v.scores.push_back(static_cast<float>(s));
  }
  TS_ASSIGN_OR_RETURN(const GgufValue* types, m.array("tokenizer.ggml.token_type", false, true));
  if (types != nullptr) {
    if (static_cast<int64_t>(types->ints.size()) != n) {
      return m.wrong("tokenizer.ggml.token_type", "has " + std::to_string(types->array_size()) +
                                                      " integer entries for " + std::to_string(n) + " tokens");
    }
    for (int64_t t : types->ints) v.token_types.push_back(static_cast<int32_t>(t));
  }
  TS_ASSIGN_OR_RETURN(const GgufValue* merges, m.array("tokenizer.ggml.merges", true, false));
  if (merges != nullptr) v.merges = merges->strings;
  struct IdKey {
    const char* key;
    int32_t* out;
  };
  for (IdKey k : {IdKey{"tokenizer.ggml.bos_token_id", &v.bos_id}, IdKey{"tokenizer.ggml.eos_token_id", &v.eos_id},
                  IdKey{"tokenizer.ggml.unknown_token_id", &v.unk_id},
                  IdKey{"tokenizer.ggml.padding_token_id", &v.pad_id}}) {
    // llama.cpp writes "no such token" (-1) as u32 0xFFFFFFFF.
    const GgufValue* raw = m.file().find(k.key);
    if (raw != nullptr && raw->type == GgufType::kU32 && raw->u == 0xFFFFFFFFu) {
      *k.out = -1;
      continue;
    }
    TS_ASSIGN_OR_RETURN(*k.out, m.int32(k.key, -1));
    if (*k.out < -1 || *k.out >= n) {
      return m.wrong(k.key, "= " + std::to_string(*k.out) + " is not a token id (vocabulary of " + std::to_string(n) + ")");
    }
  }
  const bool spm = v.model == "llama";
  TS_ASSIGN_OR_RETURN(v.add_bos, m.boolean("tokenizer.ggml.add_bos_token", spm));
  TS_ASSIGN_OR_RETURN(v.add_space_prefix, m.boolean("tokenizer.ggml.add_space_prefix", spm));
  TS_ASSIGN_OR_RETURN(v.chat_template, m.string("tokenizer.chat_template", std::string()));
  TS_ASSIGN_OR_RETURN(v.name, m.string("general.name", std::string()));
  return ok_status();
}

// Family features from <arch>.* keys, with llama.cpp's defaults (src/llama-model.cpp, load_hparams).
Status read_family_features(const Meta& m, ModelConfig& c, const std::string& a) {
  // Linear RoPE scaling (positions * 1 / factor) and llama.cpp's YaRN (ggml rope_yarn, every
  // architecture); other kinds change the rotation in ways not implemented here: refuse rather
  // than compute something else.
  // llama.cpp's default when the key is absent is "linear" (a rope.scale_linear or factor key
  // then applies); an explicit "none" ignores any factor (it forces freq_scale 1).
  TS_ASSIGN_OR_RETURN(std::string scaling, m.string(a + "rope.scaling.type", std::string("linear")));
  if (scaling == "yarn") {
    c.rope_yarn = true;
    TS_ASSIGN_OR_RETURN(c.yarn_orig_ctx, m.int32(a + "rope.scaling.original_context_length", c.max_seq_len));
    TS_ASSIGN_OR_RETURN(c.yarn_log_mul, m.real(a + "rope.scaling.yarn_log_multiplier", 0.0f));
    if (c.yarn_orig_ctx <= 0) return m.wrong(a + "rope.scaling.original_context_length", "must be positive");
  } else if (scaling != "none" && scaling != "linear") {
    return make_error(ErrorCode::kUnsupported, m.file().path + ": GGUF " + a + "rope.scaling.type = '" + scaling +
                                                   "' is not supported (none, linear, yarn; Llama 3 scaling comes as rope_freqs.weight)");
  }
  TS_ASSIGN_OR_RETURN(c.rope_attn_factor, m.real(a + "rope.scaling.attn_factor", 1.0f));
  if (!(std::isfinite(c.rope_attn_factor) && c.rope_attn_factor > 0.0f)) return m.wrong(a + "rope.scaling.attn_factor", "must be positive");
  TS_ASSIGN_OR_RETURN(float factor, m.real(a + "rope.scaling.factor", 0.0f));
  if (factor == 0.0f) {
    TS_ASSIGN_OR_RETURN(factor, m.real(a + "rope.scale_linear", 0.0f));
  }
  if (!(std::isfinite(factor) && factor >= 0.0f)) return m.wrong(a + "rope.scaling.factor", "must be a positive number");
  c.rope_freq_scale = factor == 0.0f || scaling == "none" ? 1.0f : 1.0f / factor;
  if (c.architecture == "gemma2") {
    c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
    // Queries are scaled by 1/sqrt(query_pre_attn_scalar): head_dim for 2B/9B, dim/heads for 27B
    // (46 layers), as llama.cpp's build_gemma2 chooses by model size.
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_layers == 46 ? c.dim / c.n_heads : c.head_dim));
    TS_ASSIGN_OR_RETURN(c.attn_softcap, m.real(a + "attn_logit_softcapping", 50.0f));
    TS_ASSIGN_OR_RETURN(c.final_softcap, m.real(a + "final_logit_softcapping", 30.0f));
    TS_ASSIGN_OR_RETURN(c.sliding_window, m.int32(a + "attention.sliding_window", 4096));
    c.swa_every = 2;
    c.post_norms = true;
    c.ffn_act = FfnActivation::kGeluTanh;
  } else if (c.architecture == "phi3") {
    // llama.cpp's defaults for Phi-3 files written before the key existed.
    int32_t fallback = 0;
    if ((c.n_layers == 32 || c.n_layers == 40) && c.max_seq_len == 4096) fallback = 2047;
    if (c.n_layers == 32 && c.n_kv_heads == 32 && c.max_seq_len == 131072) fallback = 262144;
    if (c.n_layers == 40 && c.max_seq_len == 131072) fallback = 131072;
    TS_ASSIGN_OR_RETURN(c.sliding_window, m.int32(a + "attention.sliding_window", fallback));
  } else {
    // Mistral v0.1 style files may state a window; llama.cpp's llama graph ignores it, Tessera applies it.
    TS_ASSIGN_OR_RETURN(c.sliding_window, m.int32(a + "attention.sliding_window", 0));
  }
  if (c.sliding_window < 0) return m.wrong(a + "attention.sliding_window", "must not be negative");
  for (float cap : {c.attn_softcap, c.final_softcap}) {
    if (!(std::isfinite(cap) && cap >= 0.0f)) return m.wrong(a + "*_logit_softcapping", "must be a non-negative number");
  }
  return ok_status();
}

Status read_rope_freqs(const RawTensor& t, ModelConfig& c, const std::string& path) {
  const int64_t n = c.head_dim / 2;
  const int64_t count = t.shape.empty() ? 0 : t.shape.back();
  if (t.dtype != DType::kF32 || count != n || t.nbytes != static_cast<size_t>(n) * 4) {
    return make_error(ErrorCode::kCorruptFile, path + ": GGUF tensor " + t.name + " must be " + std::to_string(n) +
                                                   " f32 values (head_dim / 2)");
  }
  c.rope_freq_factors.resize(static_cast<size_t>(n));
  std::memcpy(c.rope_freq_factors.data(), t.data, static_cast<size_t>(n) * 4);
  for (float f : c.rope_freq_factors) {
    if (!(std::isfinite(f) && f > 0.0f)) {
      return make_error(ErrorCode::kCorruptFile, path + ": GGUF tensor " + t.name + " holds a non-positive factor");
    }
  }
  return ok_status();
}

// DeepSeek-V2's MoE keys (llama.cpp's load_hparams for LLM_ARCH_DEEPSEEK2): the first
// leading_dense_block_count layers are dense; the routed experts have expert_feed_forward_length,
// expert_shared_count shared experts form one ungated MLP of that many times the expert size;
// softmax gating (sigmoid gating and group-limited routing, DeepSeek-V3, are refused).
Status read_deepseek2_experts(const Meta& m, ModelConfig& c, const std::string& a) {
  TS_ASSIGN_OR_RETURN(c.n_experts, m.int32(a + "expert_count"));
  TS_ASSIGN_OR_RETURN(c.n_experts_used, m.int32(a + "expert_used_count"));
  if (c.n_experts <= 0 || c.n_experts > 4096) return m.wrong(a + "expert_count", "= " + std::to_string(c.n_experts) + " is out of range [1, 4096]");
  if (c.n_experts_used <= 0 || c.n_experts_used > c.n_experts) {
    return m.wrong(a + "expert_used_count", "= " + std::to_string(c.n_experts_used) + " is out of range [1, expert_count]");
  }
  TS_ASSIGN_OR_RETURN(c.n_dense_lead, m.int32(a + "leading_dense_block_count"));
  if (c.n_dense_lead < 0 || c.n_dense_lead > c.n_layers) return m.wrong(a + "leading_dense_block_count", "is out of range [0, block_count]");
  TS_ASSIGN_OR_RETURN(c.expert_hidden_dim, m.int32(a + "expert_feed_forward_length"));
  TS_ASSIGN_OR_RETURN(int32_t shared, m.int32(a + "expert_shared_count"));
  if (shared < 0 || shared > 64) return m.wrong(a + "expert_shared_count", "is out of range [0, 64]");
  c.shared_expert_hidden_dim = shared * c.expert_hidden_dim;
  TS_ASSIGN_OR_RETURN(c.expert_weights_scale, m.real(a + "expert_weights_scale", 0.0f));
  if (m.file().find(a + "expert_weights_scale") == nullptr) return m.missing(a + "expert_weights_scale");
  if (!(std::isfinite(c.expert_weights_scale) && c.expert_weights_scale > 0.0f)) return m.wrong(a + "expert_weights_scale", "must be positive");
  TS_ASSIGN_OR_RETURN(c.expert_weights_norm, m.boolean(a + "expert_weights_norm", false));
  TS_ASSIGN_OR_RETURN(int32_t gating, m.int32(a + "expert_gating_func", 1));
  if (gating != 0 && gating != 1 && gating != 2) {
    return make_error(ErrorCode::kUnsupported, m.file().path + ": GGUF " + a + "expert_gating_func = " + std::to_string(gating) +
                                                   " is not supported; softmax (1) and sigmoid (2, DeepSeek-V3) are");
  }
  c.expert_sigmoid = gating == 2;
  TS_ASSIGN_OR_RETURN(c.n_expert_groups, m.int32(a + "expert_group_count", 1));
  TS_ASSIGN_OR_RETURN(c.n_expert_groups_used, m.int32(a + "expert_group_used_count", c.n_expert_groups));
  if (c.n_expert_groups < 1 || c.n_experts % c.n_expert_groups != 0 || (c.n_expert_groups > 1 && c.n_experts / c.n_expert_groups < 2)) {
    return m.wrong(a + "expert_group_count", "= " + std::to_string(c.n_expert_groups) + " does not split " +
                                                 std::to_string(c.n_experts) + " experts into groups of at least 2");
  }
  if (c.n_expert_groups_used < 1 || c.n_expert_groups_used > c.n_expert_groups ||
      c.n_experts_used > c.n_expert_groups_used * (c.n_experts / c.n_expert_groups)) {
    return m.wrong(a + "expert_group_used_count", "= " + std::to_string(c.n_expert_groups_used) + " of " +
                                                      std::to_string(c.n_expert_groups) + " groups cannot hold " +
                                                      std::to_string(c.n_experts_used) + " chosen experts");
  }
  if (c.n_expert_groups > 1 && !c.expert_sigmoid) {
    return make_error(ErrorCode::kUnsupported, m.file().path + ": GGUF " + a + "expert_group_count = " +
                                                   std::to_string(c.n_expert_groups) + " with softmax gating is not supported");
  }
  if (c.expert_hidden_dim <= 0) return m.wrong(a + "expert_feed_forward_length", "must be positive");
  return ok_status();
}

// Multi-head latent attention keys (deepseek2): kv_lora_rank, q_lora_rank (0 or absent: a plain
// attn_q, DeepSeek-V2-Lite), the rope part rope.dimension_count of key_length, value_length.
Status read_mla(const Meta& m, ModelConfig& c, const std::string& a, int32_t rope_dims, int32_t value_length) {
  TS_ASSIGN_OR_RETURN(c.kv_lora_rank, m.int32(a + "attention.kv_lora_rank"));
  TS_ASSIGN_OR_RETURN(c.q_lora_rank, m.int32(a + "attention.q_lora_rank", 0));
  if (c.kv_lora_rank <= 0 || c.kv_lora_rank > 65536) return m.wrong(a + "attention.kv_lora_rank", "is out of range [1, 65536]");
  if (c.q_lora_rank < 0 || c.q_lora_rank > 65536) return m.wrong(a + "attention.q_lora_rank", "is out of range [0, 65536]");
  if (rope_dims <= 0 || rope_dims >= c.head_dim || rope_dims % 2 != 0) {
    return m.wrong(a + "rope.dimension_count", "= " + std::to_string(rope_dims) + " must be even and below key_length " +
                                                 std::to_string(c.head_dim));
  }
  if (value_length <= 0 || value_length > c.head_dim) {
    return make_error(ErrorCode::kUnsupported, m.file().path + ": GGUF " + a + "attention.value_length = " +
                                                   std::to_string(value_length) + " above key_length " + std::to_string(c.head_dim) +
                                                   " is not supported (the K/V cache pads V to the key length)");
  }
  c.rope_dim = rope_dims;
  c.v_head_dim = value_length;
  c.n_kv_heads = c.n_heads;  // the decompressed K/V: one per head
  return ok_status();
}

// Mixture-of-experts keys (llama.cpp's load_hparams): <arch>.expert_count and expert_used_count
// for a `llama` (Mixtral), `qwen2moe` or `qwen3moe` file; the Qwen MoE expert sizes default as
// llama.cpp's do (n_ff / n_expert_used routed, n_ff shared). Mixtral and Qwen3-MoE (llama.cpp's
// build_qwen3moe passes norm_w = true: norm_topk_prob) renormalize the chosen experts' weights.
Status read_experts(const Meta& m, ModelConfig& c, const std::string& a) {
  const bool qwen2moe = c.architecture == "qwen2moe", qwen3moe = c.architecture == "qwen3moe";
  if (c.architecture == "deepseek2") return read_deepseek2_experts(m, c, a);
  if (!qwen2moe && !qwen3moe && c.architecture != "llama" && c.architecture != "mistral") return ok_status();
  TS_ASSIGN_OR_RETURN(c.n_experts, m.int32(a + "expert_count", 0));
  TS_ASSIGN_OR_RETURN(c.n_experts_used, m.int32(a + "expert_used_count", 0));
  if (c.n_experts == 0 && !qwen2moe && !qwen3moe) return ok_status();
  if (c.n_experts <= 0 || c.n_experts > 4096) return m.wrong(a + "expert_count", "= " + std::to_string(c.n_experts) + " is out of range [1, 4096]");
  if (c.n_experts_used <= 0 || c.n_experts_used > c.n_experts) {
    return m.wrong(a + "expert_used_count", "= " + std::to_string(c.n_experts_used) + " is out of range [1, expert_count = " +
                                                std::to_string(c.n_experts) + "]");
  }
  if (qwen2moe) {
    TS_ASSIGN_OR_RETURN(c.expert_hidden_dim, m.int32(a + "expert_feed_forward_length", 0));
    if (c.expert_hidden_dim == 0) c.expert_hidden_dim = c.hidden_dim / c.n_experts_used;
    TS_ASSIGN_OR_RETURN(c.shared_expert_hidden_dim, m.int32(a + "expert_shared_feed_forward_length", 0));
    if (c.shared_expert_hidden_dim == 0) c.shared_expert_hidden_dim = c.hidden_dim;
    c.expert_weights_norm = false;
  } else if (qwen3moe) {
    TS_ASSIGN_OR_RETURN(c.expert_hidden_dim, m.int32(a + "expert_feed_forward_length", 0));
    if (c.expert_hidden_dim == 0) c.expert_hidden_dim = c.hidden_dim / c.n_experts_used;
    c.expert_weights_norm = true;
  } else {
    c.expert_hidden_dim = c.hidden_dim;  // llama.cpp's llama graph: each expert has feed_forward_length
    c.expert_weights_norm = true;
  }
  if (c.expert_hidden_dim <= 0 || c.shared_expert_hidden_dim < 0) {
    return m.wrong(a + "expert_feed_forward_length", "gives a non-positive expert size");
  }
  return ok_status();
}

std::string family_of(const ModelConfig& c, std::string name) {
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* f : {"smollm2", "mixtral", "mistral", "qwen2.5", "llama3", "llama-3", "gemma2", "gemma-2", "phi3", "phi-3"}) {
    if (name.find(f) != std::string::npos) {
      std::string out(f);
      out.erase(std::remove(out.begin(), out.end(), '-'), out.end());
      return out;
    }
  }
  if (c.architecture == "llama" && !c.rope_freq_factors.empty()) return "llama3";
  return c.architecture;
}

// GGUF tensor shape (ggml ne, innermost first) -> RawTensor shape (outermost first).
std::vector<int64_t> to_shape(const std::vector<uint64_t>& ne) {
  std::vector<int64_t> shape(ne.rbegin(), ne.rend());
  // Trailing ggml dimensions of 1 (e.g. ne = {64, 1}) make a 1-D vector a [1, n] matrix;
  // drop leading 1s beyond the second dimension.
  while (shape.size() > 2 && shape.front() == 1) shape.erase(shape.begin());
  return shape;
}

bool is_model_tensor(const std::string& name) {
  return name.rfind("blk.", 0) == 0 || name.rfind("token_embd.", 0) == 0 || name.rfind("output", 0) == 0 ||
         name.rfind("rope_", 0) == 0;
}

}  // namespace

Result<std::unique_ptr<Model>> load_gguf(std::shared_ptr<const FileBytes> file, const LoadOptions& options) {
  const std::string& path = file->path();
  TS_ASSIGN_OR_RETURN(GgufFile g, parse_gguf(*file));
  Meta m(g);
  auto model = std::make_unique<LoadedModel>(ModelFormat::kGguf, path);
  ModelConfig& c = model->mutable_config();
  TS_ASSIGN_OR_RETURN(c.architecture, m.string("general.architecture"));
  if (!architecture_supported(c.architecture)) {
    return make_error(ErrorCode::kUnsupported, path + ": GGUF general.architecture '" + c.architecture +
                                                   "' is not supported (" + supported_architectures() + ")");
  }
  const std::string a = c.architecture + ".";
  const bool qwen3 = c.architecture == "qwen3" || c.architecture == "qwen3moe";
  const bool qwen = c.architecture == "qwen2" || c.architecture == "qwen2moe" || qwen3, gemma2 = c.architecture == "gemma2";
  TS_ASSIGN_OR_RETURN(c.dim, m.int32(a + "embedding_length"));
  TS_ASSIGN_OR_RETURN(c.hidden_dim, m.int32(a + "feed_forward_length"));
  TS_ASSIGN_OR_RETURN(c.n_layers, m.int32(a + "block_count"));
  TS_ASSIGN_OR_RETURN(c.n_heads, m.int32(a + "attention.head_count"));
  TS_ASSIGN_OR_RETURN(c.n_kv_heads, m.int32(a + "attention.head_count_kv", c.n_heads));
  TS_ASSIGN_OR_RETURN(c.max_seq_len, m.int32(a + "context_length"));
  TS_ASSIGN_OR_RETURN(c.rms_eps, m.real(a + "attention.layer_norm_rms_epsilon", qwen || gemma2 ? 1e-6f : 1e-5f));
  TS_ASSIGN_OR_RETURN(c.rope_theta, m.real(a + "rope.freq_base", qwen ? 1000000.0f : 10000.0f));
  if (c.n_heads <= 0) return m.wrong(a + "attention.head_count", "= " + std::to_string(c.n_heads) + " must be positive");
  if (c.dim % c.n_heads != 0 && g.find(a + "attention.key_length") == nullptr) {
    return m.wrong(a + "embedding_length", "= " + std::to_string(c.dim) + " is not a multiple of the head count and " +
                                               a + "attention.key_length is absent");
  }
  TS_ASSIGN_OR_RETURN(c.head_dim, m.int32(a + "attention.key_length", c.dim / c.n_heads));
  TS_ASSIGN_OR_RETURN(int32_t value_length, m.int32(a + "attention.value_length", c.head_dim));
  TS_ASSIGN_OR_RETURN(int32_t rope_dims, m.int32(a + "rope.dimension_count", c.head_dim));
  const bool mla = c.architecture == "deepseek2";
  if (mla) {
    TS_TRY(read_mla(m, c, a, rope_dims, value_length));
  } else if (value_length != c.head_dim) {
    return make_error(ErrorCode::kUnsupported, path + ": GGUF " + a + "attention.value_length = " +
                                                   std::to_string(value_length) + " differs from key_length " +
                                                   std::to_string(c.head_dim));
  }
  if (!mla && rope_dims != c.head_dim) {
    return make_error(ErrorCode::kUnsupported, path + ": GGUF " + a + "rope.dimension_count = " +
                                                   std::to_string(rope_dims) + " (partial rotary) is not supported; head_dim is " +
                                                   std::to_string(c.head_dim));
  }
  // llama.cpp's rope type per architecture: NORM (adjacent pairs) for llama, NEOX (halves) for the others.
  c.rope_layout = c.architecture == "llama" || c.architecture == "mistral" || mla ? RopeLayout::kInterleaved : RopeLayout::kHalves;
  c.qk_norm = qwen3;  // llama.cpp's build_qwen3 / build_qwen3moe: attn_q_norm, attn_k_norm
  TS_TRY(read_family_features(m, c, a));
  TS_TRY(read_experts(m, c, a));
  if (mla) {  // llama.cpp's build_deepseek2: kq_scale = mscale^2 / sqrt(key_length), YaRN's attention factor
    const float mscale = 1.0f + c.yarn_log_mul * std::log(1.0f / c.rope_freq_scale);
    c.attn_scale = mscale * mscale / std::sqrt(static_cast<float>(c.head_dim));
  }

  TensorMap tensors;
  for (const GgufTensorInfo& t : g.tensors) {
    std::optional<DType> dt = dtype_from_ggml(t.type);
    if (!dt) {
      if (!is_model_tensor(t.name)) continue;  // not used by the forward pass
      return make_error(ErrorCode::kUnsupported, path + ": GGUF tensor " + t.name + " has type " +
                                                     ggml_type_name(t.type) +
                                                     ", which is not supported (" + supported_ggml_types() + ")");
    }
    tensors.emplace(t.name, RawTensor{.name = t.name, .dtype = *dt, .shape = to_shape(t.ne), .data = t.data,
                                      .nbytes = t.nbytes});
  }
  // Llama 3.x RoPE scaling: the frequency factors tensor (llama.cpp's rope_freqs, one per
  // rotated pair; every layer uses it). Phi-3 128k / Phi-3.5's LongRoPE: two such tensors, of
  // which llama.cpp's build_rope_factors takes the long ones when the context served exceeds
  // rope.scaling.original_context_length, else the short ones. Tessera serves the model's whole
  // context (the scheduler's --max-context only caps it), so: long when context_length does.
  const auto lf = tensors.find("rope_factors_long.weight"), sf = tensors.find("rope_factors_short.weight");
  const bool longrope = lf != tensors.end() || sf != tensors.end();
  if (longrope && (lf == tensors.end() || sf == tensors.end() || tensors.count("rope_freqs.weight") != 0)) {
    return make_error(ErrorCode::kCorruptFile, path + ": GGUF LongRoPE needs both rope_factors_long.weight and "
                                                      "rope_factors_short.weight, and no rope_freqs.weight");
  }
  if (auto f = tensors.find("rope_freqs.weight"); f != tensors.end()) TS_TRY(read_rope_freqs(f->second, c, path));
  if (longrope) {
    TS_ASSIGN_OR_RETURN(const int32_t orig, m.int32(a + "rope.scaling.original_context_length", c.max_seq_len));
    TS_TRY(read_rope_freqs(c.max_seq_len > orig ? lf->second : sf->second, c, path));
    c.rope_longrope = true;
    c.rope_longrope_long = c.max_seq_len > orig;
  }
  TS_ASSIGN_OR_RETURN(std::string name, m.string("general.name", std::string()));
  c.family = family_of(c, name);
  auto emb = tensors.find("token_embd.weight");
  if (emb == tensors.end()) return make_error(ErrorCode::kCorruptFile, path + ": GGUF tensor token_embd.weight is missing");
  if (emb->second.shape.size() != 2 || emb->second.shape[0] <= 0 ||
      emb->second.shape[0] > std::numeric_limits<int32_t>::max()) {
    return make_error(ErrorCode::kCorruptFile, path + ": GGUF tensor token_embd.weight is not a [vocab, dim] matrix");
  }
  c.vocab_size = static_cast<int32_t>(emb->second.shape[0]);
  c.attn_bias = tensors.count("blk.0.attn_q.bias") != 0;
  if (c.architecture == "phi3" && c.head_dim * c.n_heads != c.dim) {
    return make_error(ErrorCode::kCorruptFile, path + ": phi3 needs head_dim * heads == embedding_length (llama.cpp's layout)");
  }
  c.tied_embeddings = tensors.count("output.weight") == 0;
  TS_TRY(validate_config(c, path));
  TS_TRY(load_vocab(m, model->vocab, c.vocab_size, path));
  TS_TRY(assemble_model(*model, tensors, path, options));
  model->retain(std::move(file));
  return std::unique_ptr<Model>(std::move(model));
}

Result<VocabSpec> read_gguf_vocab(const FileBytes& file) {
  TS_ASSIGN_OR_RETURN(GgufFile g, parse_gguf(file));
  Meta m(g);
  int32_t rows = std::numeric_limits<int32_t>::max();  // no embedding: no bound from it
  for (const GgufTensorInfo& t : g.tensors) {
    if (t.name == "token_embd.weight" && t.ne.size() == 2 && t.ne[1] > 0 &&
        t.ne[1] <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      rows = static_cast<int32_t>(t.ne[1]);
    }
  }
  VocabSpec vocab;
  TS_TRY(load_vocab(m, vocab, rows, file.path()));
  return vocab;
}

}  // namespace tessera::loaders
