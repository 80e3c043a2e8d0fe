// The CPU engine: model checks, the CpuBackend entry points and the Engine that owns a
// CpuBackend and its StepExecutor.
#include <algorithm>
#include <string>
#include <thread>

#include "engine_impl.h"
#include "tessera/common/check.h"
#include "tessera/common/log.h"
#include "tessera/kernels/matmul.h"

namespace tessera::worker {
namespace {

Status check_tensor(const Tensor& t, const std::string& name, int64_t rows, int64_t cols, bool f32_only) {
  if (t.empty()) return make_error(ErrorCode::kInvalidArgument, "model: tensor " + name + " is missing");
  if (t.rows != rows || t.cols != cols) {
    return make_error(ErrorCode::kInvalidArgument, "model: tensor " + name + " has shape [" + std::to_string(t.rows) + ", " +
                                                       std::to_string(t.cols) + "], expected [" + std::to_string(rows) +
                                                       ", " + std::to_string(cols) + "]");
  }
  if (f32_only && t.dtype != DType::kF32) {
    return make_error(ErrorCode::kUnsupported, "model: tensor " + name + " must be f32 (is " + dtype_name(t.dtype) + ")");
  }
  return ok_status();
}

Status check_linear(const Tensor& t, const std::string& name, int64_t rows, int64_t cols) {
  TS_TRY(check_tensor(t, name, rows, cols, false));
  if (!kernels::matmul_supports(t.dtype)) {
    return make_error(ErrorCode::kUnsupported,
                      std::string("not implemented yet: matmul with ") + dtype_name(t.dtype) + " weights (tensor " + name + ")");
  }
  return ok_status();
}

Status check_moe(const ModelConfig& c, const LayerWeights& w, const std::string& p) {
  if (c.n_experts_used < 1 || c.n_experts_used > c.n_experts || c.n_experts > 4096 || c.expert_hidden_dim <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "model: " + std::to_string(c.n_experts_used) + " of " +
                                                       std::to_string(c.n_experts) + " experts per token");
  }
  const int64_t ne = c.n_experts, ff = c.expert_hidden_dim, sh = c.shared_expert_hidden_dim;
  TS_TRY(check_linear(w.ffn_gate_inp, p + "ffn_gate_inp", ne, c.dim));
  if (!w.ffn_exp_probs_b.empty()) TS_TRY(check_tensor(w.ffn_exp_probs_b, p + "exp_probs_b", 1, ne, true));
  if (c.n_expert_groups < 1 || c.n_experts % c.n_expert_groups != 0 || c.n_expert_groups_used < 1 ||
      c.n_expert_groups_used > c.n_expert_groups || (c.n_expert_groups > 1 && !c.expert_sigmoid)) {
    return make_error(ErrorCode::kInvalidArgument, "model: " + std::to_string(c.n_expert_groups_used) + " of " +
                                                       std::to_string(c.n_expert_groups) + " expert groups");
  }
  TS_TRY(check_linear(w.ffn_gate_exps, p + "ffn_gate_exps", ne * ff, c.dim));
  TS_TRY(check_linear(w.ffn_up_exps, p + "ffn_up_exps", ne * ff, c.dim));
  TS_TRY(check_linear(w.ffn_down_exps, p + "ffn_down_exps", ne * c.dim, ff));
  if (sh > 0) {
    if (!w.ffn_gate_inp_shexp.empty()) TS_TRY(check_tensor(w.ffn_gate_inp_shexp, p + "ffn_gate_inp_shexp", 1, c.dim, true));
    TS_TRY(check_linear(w.ffn_gate_shexp, p + "ffn_gate_shexp", sh, c.dim));
    TS_TRY(check_linear(w.ffn_up_shexp, p + "ffn_up_shexp", sh, c.dim));
    TS_TRY(check_linear(w.ffn_down_shexp, p + "ffn_down_shexp", c.dim, sh));
  }
  return ok_status();
}

Status check_mla(const ModelConfig& c, const LayerWeights& w, const std::string& p) {
  if (c.rope_dim <= 0 || c.rope_dim >= c.head_dim || c.rope_dim % 2 != 0 || c.v_head_dim <= 0 || c.v_head_dim > c.head_dim ||
      c.n_kv_heads != c.n_heads) {
    return make_error(ErrorCode::kInvalidArgument, "model: inconsistent latent-attention dimensions");
  }
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim, nope = c.head_dim - c.rope_dim;
  if (c.q_lora_rank > 0) {
    TS_TRY(check_linear(w.attn_q_a, p + "attn_q_a", c.q_lora_rank, c.dim));
    TS_TRY(check_tensor(w.attn_q_a_norm, p + "attn_q_a_norm", 1, c.q_lora_rank, true));
    TS_TRY(check_linear(w.attn_q_b, p + "attn_q_b", q_dim, c.q_lora_rank));
  } else {
    TS_TRY(check_linear(w.wq, p + "attn_q", q_dim, c.dim));
  }
  TS_TRY(check_linear(w.attn_kv_a_mqa, p + "attn_kv_a_mqa", c.kv_lora_rank + c.rope_dim, c.dim));
  TS_TRY(check_tensor(w.attn_kv_a_norm, p + "attn_kv_a_norm", 1, c.kv_lora_rank, true));
  TS_TRY(check_linear(w.attn_kv_b, p + "attn_kv_b", c.n_heads * (nope + c.v_head_dim), c.kv_lora_rank));
  TS_TRY(check_linear(w.wo, p + "attn_output", c.dim, static_cast<int64_t>(c.n_heads) * c.v_head_dim));
  return ok_status();
}

}  // namespace

Status check_model(const Model& model) {
  const ModelConfig& c = model.config();
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 ||
      c.vocab_size <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "model: config has a non-positive dimension");
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return make_error(ErrorCode::kInvalidArgument, "model: n_heads " + std::to_string(c.n_heads) +
                                                       " is not a multiple of n_kv_heads " + std::to_string(c.n_kv_heads));
  }
  if (c.head_dim % 2 != 0) return make_error(ErrorCode::kInvalidArgument, "model: head_dim must be even for RoPE");
  if (static_cast<int32_t>(model.layers.size()) != c.n_layers) {
    return make_error(ErrorCode::kInvalidArgument, "model: " + std::to_string(model.layers.size()) + " layers, config says " +
                                                       std::to_string(c.n_layers));
  }
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim, kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  TS_TRY(check_tensor(model.tok_embeddings, "token_embd", c.vocab_size, c.dim, false));
  TS_TRY(check_tensor(model.final_norm, "output_norm", 1, c.dim, true));
  TS_TRY(check_linear(model.output, "output", c.vocab_size, c.dim));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model.layers[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    TS_TRY(check_tensor(w.attn_norm, p + "attn_norm", 1, c.dim, true));
    TS_TRY(check_tensor(w.ffn_norm, p + "ffn_norm", 1, c.dim, true));
    if (c.is_mla()) {
      TS_TRY(check_mla(c, w, p));
    } else {
      TS_TRY(check_linear(w.wq, p + "attn_q", q_dim, c.dim));
      TS_TRY(check_linear(w.wk, p + "attn_k", kv_dim, c.dim));
      TS_TRY(check_linear(w.wv, p + "attn_v", kv_dim, c.dim));
      TS_TRY(check_linear(w.wo, p + "attn_output", c.dim, q_dim));
    }
    if (c.layer_is_moe(l)) {
      TS_TRY(check_moe(c, w, p));
    } else {
      TS_TRY(check_linear(w.w_gate, p + "ffn_gate", c.hidden_dim, c.dim));
      TS_TRY(check_linear(w.w_up, p + "ffn_up", c.hidden_dim, c.dim));
      TS_TRY(check_linear(w.w_down, p + "ffn_down", c.dim, c.hidden_dim));
    }
    if (c.post_norms) {
      TS_TRY(check_tensor(w.attn_post_norm, p + "post_attention_norm", 1, c.dim, true));
      TS_TRY(check_tensor(w.ffn_post_norm, p + "post_ffw_norm", 1, c.dim, true));
    }
    if (c.qk_norm) {
      TS_TRY(check_tensor(w.attn_q_norm, p + "attn_q_norm", 1, c.head_dim, true));
      TS_TRY(check_tensor(w.attn_k_norm, p + "attn_k_norm", 1, c.head_dim, true));
    }
    if (c.attn_bias) {
      TS_TRY(check_tensor(w.bq, p + "attn_q.bias", 1, q_dim, true));
      TS_TRY(check_tensor(w.bk, p + "attn_k.bias", 1, kv_dim, true));
      TS_TRY(check_tensor(w.bv, p + "attn_v.bias", 1, kv_dim, true));
    }
  }
  return ok_status();
}

Status check_plain_llama(const ModelConfig& c, const std::string& backend) {
  std::string missing;
  if (!c.rope_freq_factors.empty()) missing = "RoPE frequency factors (Llama 3 rope_freqs)";
  else if (c.rope_freq_scale != 1.0f) missing = "linear RoPE scaling";
  else if (c.embedding_scale != 1.0f) missing = "embedding scaling";
  else if (c.attn_scale > 0.0f) missing = "a custom attention scale";
  else if (c.attn_softcap > 0.0f || c.final_softcap > 0.0f) missing = "logit soft-capping";
  else if (c.sliding_window > 0) missing = "sliding-window attention (" + std::to_string(c.sliding_window) + ")";
  else if (c.post_norms) missing = "post-attention/post-MLP norms";
  else if (c.qk_norm) missing = "per-head Q/K RMSNorm";
  else if (c.is_mla()) missing = "multi-head latent attention";
  else if (c.rope_yarn) missing = "YaRN RoPE scaling";
  else if (c.rope_attn_factor != 1.0f) missing = "a RoPE attention factor (LongRoPE)";
  else if (c.ffn_act != FfnActivation::kSilu) missing = "the GeGLU MLP";
  else if (c.is_moe()) missing = "a mixture-of-experts MLP (" + std::to_string(c.n_experts) + " experts)";
  if (missing.empty()) return ok_status();
  return make_error(ErrorCode::kUnsupported, backend + ": not implemented yet: " + missing + ", which this " + c.architecture +
                                                 " model needs (use the cpu backend)");
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, const EngineOptions& options) {
  TS_TRY(check_model(model));
  TS_TRY(kernels::check_isa_env());  // an unknown TESSERA_ISA: an error here, not a TS_CHECK in the first kernel
  const kernels::Isa isa = options.isa.value_or(kernels::detect_isa());
  if (!kernels::isa_supported(isa)) {
    const std::optional<kernels::Isa> cap = kernels::isa_cap();
    return make_error(ErrorCode::kUnsupported,
                      std::string("engine: kernel path ") + kernels::isa_name(isa) + " is not supported by this CPU" +
                          (cap ? std::string(" or is above TESSERA_ISA=") + kernels::isa_name(*cap) : std::string()));
  }
  int32_t threads = options.threads;
  if (threads < 0 || threads > 1024) {
    return make_error(ErrorCode::kInvalidArgument, "engine: threads must be in [0, 1024] (got " + std::to_string(threads) + ")");
  }
  if (threads == 0) threads = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  TS_ASSIGN_OR_RETURN(KvPool pool, KvPool::create(model.config(), options.pool));
  if (options.blend.check_layer < 0 || !(options.blend.recompute_ratio >= 0.0f && options.blend.recompute_ratio <= 1.0f) ||
      options.blend.cache_bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument, "engine: blend needs check_layer >= 0, recompute_ratio in [0, 1], cache_bytes >= 0");
  }
  if (options.mla_expand_rows < 0) {
    return make_error(ErrorCode::kInvalidArgument, "engine: mla_expand_rows must be >= 0 (got " + std::to_string(options.mla_expand_rows) + ")");
  }
  auto impl = std::make_unique<Impl>(model, std::move(pool), isa, threads);
  impl->backend.set_blend_config(options.blend);
  impl->backend.set_mla_expand_rows(options.mla_expand_rows > 0 ? options.mla_expand_rows : CpuBackend::kMlaExpandRowsDefault);
  if (const size_t bytes = impl->backend.prepare_mla(); bytes > 0) {  // at load: an out-of-memory shows here, not mid-serving
    TS_LOG(kInfo) << "MLA latent cache: absorbed attn_kv_b in f32, " << (bytes >> 20) << " MiB (docs/models.md)";
  }
  if (options.weight_repack) {
    const CpuBackend::RepackStats st = impl->backend.repack_weights();
    if (st.tensors > 0) {
      TS_LOG(kInfo) << "weight repack: " << st.tensors << " tensors into 16-row interleaved blocks, "
                    << static_cast<double>(st.packed_bytes) / (1 << 20) << " MiB; "
                    << static_cast<double>(st.dropped_bytes) / (1 << 20) << " MiB of the file's pages dropped (--weight-repack, docs/models.md)";
    }
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const Model& Engine::model() const { return impl_->backend.model(); }
KvPool& Engine::pool() { return impl_->backend.pool(); }
int32_t Engine::threads() const { return impl_->backend.threads(); }
kernels::Isa Engine::isa() const { return impl_->backend.isa(); }
size_t Engine::num_request_states() const { return impl_->exec.num_request_states(); }
void Engine::reset_requests() { impl_->exec.reset_requests(); }
Backend& Engine::backend() { return impl_->backend; }
StepExecutor& Engine::executor() { return impl_->exec; }

void Engine::set_fill_handler(FillHandler handler) {
  if (!handler) {
    impl_->exec.set_fill_handler({});
    return;
  }
  impl_->exec.set_fill_handler([this, h = std::move(handler)](const KvFill& f) { return h(*this, f); });
}

Result<std::span<const float>> Engine::forward(std::span<const SeqInput> batch) { return impl_->exec.forward(batch); }

Result<StepResult> Engine::execute(const StepPlan& plan) { return impl_->exec.execute(plan); }

// ---- CpuBackend ----

PoolGeometry CpuBackend::geometry() const {
  return {.num_pages = pool_.num_pages(), .page_size = pool_.page_size(), .n_layers = cfg_.n_layers,
          .n_kv_heads = pool_.n_kv_heads(), .head_dim = pool_.head_dim(), .planes = pool_.planes()};  // the MLA latent cache: 1 head of the latent, 1 plane
}

BackendCaps CpuBackend::capabilities() const {
  BackendCaps c;  // every sampling option on the host (the defaults), no limits
  // Preference injection needs per-head K and V rows: not over the MLA latent cache (one plane of
  // latent rows; preference alpha scales V, which the latent layout does not have). K/V offload
  // only moves rows as stored, latent ones too.
  c.kv_fill = pool_.planes() == 2;
  c.kv_pages = true;  // offload moves latent rows as they are
  c.prompt_logprobs = true;
  // Not for multi-head latent attention: K/V moves re-rotate whole K rows with the plain RoPE and
  // the H2O statistic and CacheBlend's layer loop have no latent-attention path.
  // Nor for YaRN or a RoPE attention factor (LongRoPE): the re-rotations use the plain table.
  const bool plain_rope = !cfg_.rope_yarn && cfg_.rope_attn_factor == 1.0f;
  c.kv_scores = !cfg_.is_mla() && plain_rope;
  c.chunk_blend = !cfg_.is_mla() && plain_rope;
  return c;
}

Result<std::span<float>> CpuBackend::forward(std::span<const SeqInput> batch) {
  if (batch.empty()) return std::span<float>{};
  return run(batch);
}

Status CpuBackend::copy_page(int32_t src, int32_t dst) {
  pool_.copy_page(src, dst);
  return ok_status();
}

Status CpuBackend::read_kv(int32_t layer, std::span<const int64_t> slots, std::span<float> k, std::span<float> v) {
  const auto row = static_cast<size_t>(pool_.token_floats());
  TS_CHECK(layer >= 0 && layer < pool_.num_layers()) << "layer " << layer;
  TS_CHECK(k.size() == slots.size() * row && v.size() == k.size()) << k.size() << " / " << v.size() << " floats for " << slots.size() << " slots";
  for (size_t i = 0; i < slots.size(); ++i) {  // a one-plane (latent) pool: v is a copy of k
    pool_.load(layer, slots[i], 0, k.data() + i * row);
    pool_.load(layer, slots[i], 1, v.data() + i * row);
  }
  return ok_status();
}

Status CpuBackend::write_kv(int32_t layer, std::span<const int64_t> slots, std::span<const float> k, std::span<const float> v) {
  const auto row = static_cast<size_t>(pool_.token_floats());
  TS_CHECK(layer >= 0 && layer < pool_.num_layers()) << "layer " << layer;
  TS_CHECK(k.size() == slots.size() * row && v.size() == k.size()) << k.size() << " / " << v.size() << " floats for " << slots.size() << " slots";
  for (size_t i = 0; i < slots.size(); ++i) {  // a one-plane (latent) pool: v is ignored (it reads as k)
    pool_.store(layer, slots[i], 0, k.data() + i * row);
    if (pool_.planes() == 2) pool_.store(layer, slots[i], 1, v.data() + i * row);
  }
  return ok_status();
}

}  // namespace tessera::worker
