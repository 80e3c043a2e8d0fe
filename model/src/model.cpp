// Format-independent parts of model.h: format names, parameter count, fingerprint, and the
// load_model() dispatch to the per-format loaders in loaders/.
#include "tessera/model/model.h"

#include <bit>
#include <cstring>
#include <filesystem>

#include "loaded_model.h"

namespace tessera {
namespace {

// FNV-1a 64 with a final avalanche; enough for an identity of sampled content.
class Hasher {
 public:
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 0x100000001b3ULL;
    }
  }
  template <class T>
  void value(T v) {
    bytes(&v, sizeof v);
  }
  void str(const std::string& s) {
    value<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  uint64_t finish() const {
    uint64_t x = h_;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
  }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

// Shape, dtype and 8 evenly spaced 64-byte windows (plus the last one) of a tensor's bytes.
void hash_tensor(Hasher& h, const Tensor& t) {
  h.value<uint8_t>(static_cast<uint8_t>(t.dtype));
  h.value(t.rows);
  h.value(t.cols);
  if (t.empty()) return;
  const size_t total = static_cast<size_t>(t.rows) * dtype_row_bytes(t.dtype, t.cols);
  const auto* p = static_cast<const uint8_t*>(t.data);
  constexpr size_t kWindow = 64;
  constexpr size_t kWindows = 8;
  if (total <= kWindow * (kWindows + 1)) {
    h.bytes(p, total);
    return;
  }
  const size_t stride = (total - kWindow) / kWindows;
  for (size_t i = 0; i < kWindows; ++i) h.bytes(p + i * stride, kWindow);
  h.bytes(p + total - kWindow, kWindow);
}

}  // namespace

const char* model_format_name(ModelFormat f) {
  switch (f) {
    case ModelFormat::kGguf: return "gguf";
    case ModelFormat::kSafetensors: return "safetensors";
    case ModelFormat::kLlama2c: return "llama2c";
  }
  return "unknown";
}

int64_t Model::parameter_count() const {
  auto n = [](const Tensor& t) { return t.empty() ? int64_t{0} : t.rows * t.cols; };
  int64_t total = n(tok_embeddings) + n(final_norm);
  if (output.data != tok_embeddings.data) total += n(output);
  for (const LayerWeights& w : layers) {
    for (const Tensor* t : {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.bq, &w.bk, &w.bv, &w.ffn_norm, &w.w_gate,
                            &w.w_up, &w.w_down, &w.attn_post_norm, &w.ffn_post_norm, &w.ffn_gate_inp, &w.ffn_gate_exps,
                            &w.ffn_up_exps, &w.ffn_down_exps, &w.ffn_gate_inp_shexp, &w.ffn_gate_shexp, &w.ffn_up_shexp,
                            &w.ffn_down_shexp, &w.attn_q_norm, &w.attn_k_norm, &w.attn_q_a, &w.attn_q_a_norm,
                            &w.attn_q_b, &w.attn_kv_a_mqa, &w.attn_kv_a_norm, &w.attn_kv_b, &w.ffn_exp_probs_b}) {
      total += n(*t);
    }
  }
  return total;
}

namespace loaders {

uint64_t compute_fingerprint(const Model& model) {
  Hasher h;
  const ModelConfig& c = model.config();
  h.str(c.architecture);
  for (int32_t v : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size}) h.value(v);
  h.value(std::bit_cast<uint32_t>(c.rms_eps));
  h.value(std::bit_cast<uint32_t>(c.rope_theta));
  h.value<uint8_t>(static_cast<uint8_t>(c.rope_layout));
  h.value<uint8_t>(c.attn_bias);
  h.value<uint8_t>(c.tied_embeddings);
  // Family features: hashed only when set, so plain Llama fingerprints stay what they were.
  const ModelConfig plain;
  if (!c.rope_freq_factors.empty()) {
    for (float f : c.rope_freq_factors) h.value(std::bit_cast<uint32_t>(f));
  }
  for (float v : {c.rope_freq_scale, c.embedding_scale, c.attn_scale, c.attn_softcap, c.final_softcap}) {
    if (v != 0.0f && v != 1.0f) h.value(std::bit_cast<uint32_t>(v));
  }
  // Later features carry a marker byte each, so that no two of them hash alike.
  if (c.rope_attn_factor != 1.0f) {
    h.value<uint8_t>(0xA1);
    h.value(std::bit_cast<uint32_t>(c.rope_attn_factor));
  }
  if (c.sliding_window != plain.sliding_window) h.value(c.sliding_window * 16 + c.swa_every);
  if (c.post_norms) h.value<uint8_t>(1);
  if (c.qk_norm) h.value<uint8_t>(2);
  if (c.rope_yarn && !c.is_mla()) {  // YaRN outside DeepSeek (hashed below there)
    h.value<uint8_t>(0xA2);
    h.value<int64_t>(c.yarn_orig_ctx);
  }
  if (c.is_mla()) {
    for (int32_t v : {c.kv_lora_rank, c.q_lora_rank, c.rope_dim, c.v_head_dim, c.n_dense_lead, c.yarn_orig_ctx}) h.value(v);
    for (float v : {c.expert_weights_scale, c.yarn_log_mul}) h.value(std::bit_cast<uint32_t>(v));
  }
  if (c.ffn_act != plain.ffn_act) h.value<uint8_t>(static_cast<uint8_t>(c.ffn_act));
  if (c.is_moe()) {
    for (int32_t v : {c.n_experts, c.n_experts_used, c.expert_hidden_dim, c.shared_expert_hidden_dim}) h.value(v);
    h.value<uint8_t>(c.expert_weights_norm);
    if (c.expert_sigmoid) {
      for (int32_t v : {3, c.n_expert_groups, c.n_expert_groups_used}) h.value(v);
    }
  }
  hash_tensor(h, model.tok_embeddings);
  hash_tensor(h, model.final_norm);
  if (!c.tied_embeddings) hash_tensor(h, model.output);
  for (const LayerWeights& w : model.layers) {
    for (const Tensor* t : {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.bq, &w.bk, &w.bv, &w.ffn_norm, &w.w_gate,
                            &w.w_up, &w.w_down}) {
      hash_tensor(h, *t);
    }
    if (c.is_moe()) {
      for (const Tensor* t : {&w.ffn_gate_inp, &w.ffn_gate_exps, &w.ffn_up_exps, &w.ffn_down_exps, &w.ffn_gate_inp_shexp,
                              &w.ffn_gate_shexp, &w.ffn_up_shexp, &w.ffn_down_shexp}) {
        hash_tensor(h, *t);
      }
      if (!w.ffn_exp_probs_b.empty()) hash_tensor(h, w.ffn_exp_probs_b);
    }
    if (c.post_norms) {
      hash_tensor(h, w.attn_post_norm);
      hash_tensor(h, w.ffn_post_norm);
    }
    if (c.qk_norm) {
      hash_tensor(h, w.attn_q_norm);
      hash_tensor(h, w.attn_k_norm);
    }
    if (c.is_mla()) {
      for (const Tensor* t : {&w.attn_q_a, &w.attn_q_a_norm, &w.attn_q_b, &w.attn_kv_a_mqa, &w.attn_kv_a_norm, &w.attn_kv_b}) {
        hash_tensor(h, *t);
      }
    }
  }
  return h.finish();
}

}  // namespace loaders

Result<std::unique_ptr<Model>> load_model(const std::string& path, const LoadOptions& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return loaders::load_hf_directory(path, options);
  TS_ASSIGN_OR_RETURN(std::shared_ptr<const loaders::FileBytes> file, loaders::FileBytes::open(path, options.use_mmap));
  if (file->size() >= 4 && std::memcmp(file->data(), "GGUF", 4) == 0) return loaders::load_gguf(std::move(file), options);
  if (path.size() >= 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      path + ": pass the model directory (with config.json), not a single .safetensors file");
  }
  return loaders::load_llama2c(std::move(file), options);
}

Result<VocabSpec> read_model_vocab(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return VocabSpec{};
  TS_ASSIGN_OR_RETURN(std::shared_ptr<const loaders::FileBytes> file, loaders::FileBytes::open(path, /*use_mmap=*/true));
  if (file->size() >= 4 && std::memcmp(file->data(), "GGUF", 4) == 0) return loaders::read_gguf_vocab(*file);
  return VocabSpec{};
}

}  // namespace tessera
