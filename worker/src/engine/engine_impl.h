// Private: the CPU backend (the forward pass over the host page pool) and the Engine that owns
// it together with its StepExecutor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <span>
#include <utility>
#include <vector>

#include "tessera/kernels/attention.h"
#include "tessera/kernels/matmul.h"
#include "tessera/kernels/packed_weights.h"
#include "tessera/kernels/thread_pool.h"
#include "tessera/worker/blend.h"
#include "tessera/worker/engine.h"
#include "tessera/worker/step_executor.h"

namespace tessera::worker {

// v's storage with room for at least n elements (scratch buffers grow, never shrink).
template <class T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// The matmul of weight w over T activation rows (row t at in + t * in_stride) into out (row t at
// out + t * out_stride): the one MatmulArgs builder of the layer steps and the MoE MLP.
// packed: w's load-time packed copy (CpuBackend::packed_for), or null.
inline kernels::MatmulArgs matmul_args(const Tensor& w, const float* in, int64_t in_stride, float* out, int64_t out_stride,
                                       int64_t T, const kernels::PackedWeights* packed = nullptr) {
  return kernels::MatmulArgs{.w_type = w.dtype, .w = w.data, .rows = w.rows, .cols = w.cols, .x = in,
                             .x_stride = in_stride, .n = T, .y = out, .y_stride = out_stride, .w_packed = packed};
}

// Scratch of the mixture-of-experts MLP (moe_ffn.cpp), grown on demand and reused.
struct MoeScratch {
  std::vector<float> logits, weights, xg, gate, up, down, sh_gate, sh_up, sh_down, sh_logit;
  std::vector<int32_t> ids, offsets, order, pair_row;
  std::vector<kernels::MatmulArgs> list;
};

// Scratch of the multi-head latent attention (mla.cpp).
struct MlaScratch {
  std::vector<float> qa, kva, kvb, att_v, cos_sin, q_abs, att_lat, lat, kv_exp, att_exp;
  std::vector<kernels::MatmulArgs> uv_list;
};

// Scratch activations of one step, grown on demand and reused (never shrunk).
struct Scratch {
  MoeScratch moe;
  MlaScratch mla;
  std::vector<float> x, xn, q, k, v, att, o, gate, up, cos_sin, out_rows, logits;
  std::vector<int32_t> tokens, positions, token_indptr, start_pos, page_indptr, page_ids, out_row_index;
  std::vector<int64_t> slots;
};

// Scratch of CacheBlend's layer loop (blend_forward.cpp): the active rows' activations.
struct BlendScratch {
  std::vector<float> x, xn, q, k, v, att, o, gate, up, cos_sin, out_row, logits, old_kv;
  std::vector<int32_t> active, act_tokens, positions, token_indptr, start_pos, page_indptr, page_ids;
  std::vector<int64_t> slots;
  std::vector<std::pair<double, int32_t>> deviation;  // (|V - V'|^2, active row) on the check layer
  std::vector<uint8_t> keep;
};

// Where CpuBackend::attention_qkv writes each row's K and V (its own pool, this layer's slots).
struct KvStore {
  int32_t layer = -1;
  const int64_t* slots = nullptr;  // [T] distinct slots, or nullptr: nothing stored
};

// What a row of a blended prefill is (blend.h): computed in every layer, exact reused K/V (never
// computed), or reused K/V that the check layer may select for recompute.
enum class BlendRole : uint8_t { kNew, kExact, kReused };

// The "cpu" backend: f32 K/V pool in host memory, CPU kernels on its own thread pool (lent to
// the executor for sampling). Every capability, every sampling option on the host.
class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& m, KvPool p, kernels::Isa i, int n_threads)
      : model_(m), cfg_(m.config()), pool_(std::move(p)), isa_(i), threads_(std::make_unique<kernels::ThreadPool>(n_threads)),
        share_pools_(static_cast<size_t>(n_threads) + 1) {}

  std::string_view name() const override { return "cpu"; }
  const Model& model() const override { return model_; }
  PoolGeometry geometry() const override;
  BackendCaps capabilities() const override;
  Result<std::span<float>> forward(std::span<const SeqInput> batch) override;
  Status copy_page(int32_t src, int32_t dst) override;
  Status read_kv(int32_t layer, std::span<const int64_t> slots, std::span<float> k, std::span<float> v) override;
  Status write_kv(int32_t layer, std::span<const int64_t> slots, std::span<const float> k, std::span<const float> v) override;
  kernels::ThreadPool* host_threads() override { return threads_.get(); }
  Result<BlendOutcome> blend_prefill(const BlendInput& in) override;
  BlendStats blend_stats() const override;

  // CacheBlend's parameters and chunk cache budget (clears the chunk cache).
  void set_blend_config(const BlendConfig& config);
  // Over the MLA latent cache: builds every layer's absorbed attn_kv_b (mla_absorbed) now, at
  // load, rather than on the first step that needs it; returns its bytes (0 for other models).
  size_t prepare_mla();
  // Over the MLA latent cache: the fewest rows of one sequence in a step that take the expanded
  // form (mla_expanded_attention) instead of the absorbed one; >= 1.
  void set_mla_expand_rows(int32_t rows) { mla_expand_rows_ = rows; }
  static constexpr int32_t kMlaExpandRowsDefault = 16;
  // The most scratch the expanded form may use for one sequence's context (about 12,000 tokens
  // of V2-Lite); longer contexts take the absorbed form.
  static constexpr int64_t kMlaExpandMaxBytes = int64_t{512} << 20;
  // Load-time weight repack (repack.cpp): a packed copy (kernels/packed_weights.h) of every
  // matmul weight (attention, dense MLP, each routed expert's and the shared expert's
  // matrices, output) whose type and kernel path have one;
  // without AMX the file pages of the originals are dropped (madvise) so the resident set does
  // not double (a tied embedding's rows are read back from the file as they are looked up); with
  // AMX prefill batches read the originals, so they stay.
  struct RepackStats {
    int32_t tensors = 0;
    size_t packed_bytes = 0, dropped_bytes = 0;
  };
  RepackStats repack_weights();

  KvPool& pool() { return pool_; }
  kernels::Isa isa() const { return isa_; }
  int32_t threads() const { return threads_->size(); }

 private:
  // The forward pass proper (forward.cpp); the batch has been validated.
  std::span<float> run(std::span<const SeqInput> batch);
  // A weight's matmul choices from the placement rules (Tensor::exec): the pool of its
  // thread_share of the threads (created on first use) and its kernel path.
  kernels::ThreadPool* pool_for(const Tensor& w);
  kernels::Isa isa_for(const Tensor& w) const;
  // fn(t) for every row t in [0, T): one parallel region over the rows on threads_ when T >= 4
  // (a many-sequence decode step, where serial row work would leave the other threads spinning),
  // inline otherwise. Rows must be independent; each is computed the same way either way (exact).
  template <class F>
  void for_rows(int64_t T, F&& fn) {
    if (T >= 4 && threads_->size() > 1) {
      threads_->parallel_for(T, fn);
    } else {
      for (int64_t t = 0; t < T; ++t) fn(t);
    }
  }
  // w's packed copy (repack_weights), or null.
  const kernels::PackedWeights* packed_for(const Tensor& w) const;
  // Idle prefetch (kernels/thread_pool.h) for decode-sized T: the next parallel region on `pool`
  // is followed by one matmul_batch of `next` (T rows each), whose weights its threads then
  // prefetch while they wait; no hint unless every one of them runs on `pool`.
  void hint_next(kernels::ThreadPool* pool, std::initializer_list<const Tensor*> next, int64_t T);

  // The per-layer steps shared by the forward pass (run) and CacheBlend's layer loop
  // (blend_layers), over T rows of stride dim (layer_step.cpp): a family feature added here
  // reaches both passes.
  // y = x W^T for T rows (w's placement: pool_for / isa_for).
  void linear(const Tensor& w, const float* in, int64_t in_stride, float* out, int64_t out_stride, int64_t T);
  // x [T, dim] = the tokens' embedding rows, times embedding_scale.
  void embed(std::span<const int32_t> tokens, float* x);
  // q [T, n_heads * head_dim], k and v [T, n_kv_heads * head_dim] of the normalized rows xn: the
  // projections (one parallel region; mla_qkv for MLA's decompressed form), biases, per-head Q/K
  // RMSNorm (qk_norm) and RoPE with cs (rope_table's rows of the T positions; MLA rotates its rope
  // parts in mla_qkv). With store.slots, row t's K and V are then written to pool_'s slot
  // store.slots[t] of layer store.layer (in the same parallel region as the rotation).
  void attention_qkv(const LayerWeights& w, const float* xn, int64_t T, const float* cs, float* q, float* k, float* v,
                     KvStore store = {});
  // The rest of layer `layer` once attention's output projection is in o [T, dim]: x += post_norm(o),
  // then the MLP block x += post_norm(mlp(rmsnorm(x))) (dense or mixture of experts). xn, o, gate,
  // up: scratch of [T, dim] / [T, hidden_dim] floats.
  // next_layer: the layer after this one (its Q/K/V weights are prefetched during the MLP), or
  // null for the last (the output head's).
  void residual_and_mlp(int32_t layer, const LayerWeights& w, int64_t T, float* x, float* xn, float* o, float* gate,
                        float* up, MoeScratch& moe, const LayerWeights* next_layer);
  // Logits [rows.size(), vocab] of the rows of x at the given indices (final norm, output matmul,
  // soft-capping), in `logits`; `normed` is scratch.
  std::span<float> logits_of(const float* x, std::span<const int32_t> rows, std::vector<float>& normed,
                             std::vector<float>& logits);
  // Multi-head latent attention (mla.cpp): from T normalized rows xn, q [T, n_heads * head_dim]
  // with RoPE'd rope parts, and the decompressed per-head k and v ([T, n_heads * head_dim], V
  // zero-padded to head_dim). cs: mla_rope_table's rows for the T positions.
  void mla_qkv(const LayerWeights& w, const float* xn, int64_t T, const float* cs, float* q, float* k, float* v);
  // The absorbed form over the latent cache (pool planes 1; mla.cpp): writes the T rows'
  // latents [c, k_pe] into their slots (s_.slots) of `layer`, attends with the queries absorbed
  // through attn_kv_b's K rows (q: [T, n_heads * head_dim] scratch) and returns each head's
  // output through attn_kv_b's V rows in att_v [T, n_heads * v_head_dim]. base: the step's
  // attention arguments (sequences, pages, scale).
  // Sequences with at least mla_expand_rows_ rows in the step attend through
  // mla_expanded_attention, runs of the others through mla_absorbed_attention.
  void mla_latent_attention(const LayerWeights& w, int32_t layer, const float* xn, int64_t T, const float* cs,
                            const kernels::PagedAttentionArgs& base, float* q, float* att_v);
  // The absorbed form for sequences [s0, s1) of base (their rows of q / att_v, indices absolute):
  // queries mapped into the latent space, attention over the latent rows (kv_lora_rank + rope
  // values per key), each head's output through W_UV_h.
  void mla_absorbed_attention(const LayerWeights& w, int32_t layer, const kernels::PagedAttentionArgs& base, int32_t s0,
                              int32_t s1, const float* q, float* att_v);
  // Sequence b of base: its context's latent rows (positions [0, start + rows)) expanded through
  // attn_kv_b into per-head K [W_UK_h c, k_pe] and V W_UV_h c (one f32 scratch page, not the
  // pool), then the ordinary paged attention with head_dim keys. The cache stays latent.
  void mla_expanded_attention(const LayerWeights& w, int32_t layer, const kernels::PagedAttentionArgs& base, int32_t b,
                              const float* q, float* att_v);
  void mla_q_latent(const LayerWeights& w, const float* xn, int64_t T, const float* cs, float* q, float* kva);
  // attn_kv_b of one layer split and dequantized for the absorbed form (built on first use, kept
  // for the backend's life: n_heads * kv_lora_rank * (key_length - rope_dim + value_length)
  // floats per layer): uk_t [n_heads][kv_lora_rank][nope] (each head's K rows transposed), uv
  // [n_heads][value_length][kv_lora_rank] (its V rows).
  struct MlaAbsorbed {
    std::vector<float> uk_t, uv;
  };
  const MlaAbsorbed& mla_absorbed(int32_t layer, const LayerWeights& w);

  // CacheBlend (blend.cpp, blend_forward.cpp). Rows [0, tokens.size()) of one sequence at cache
  // indices first + i, pages block_table; their roles decide which are computed per layer.
  struct BlendRows {
    std::span<const int32_t> tokens;
    int32_t first = 0;
    std::span<const int32_t> block_table;
    std::span<const BlendRole> role;
    float ratio = 1.0f;
    int32_t check_layer = 1;
    bool want_logits = false;
  };
  // Returns the last row's logits (want_logits) in bs_; *recomputed = reused rows computed past the check layer.
  std::span<float> blend_layers(KvPool& pool, const BlendRows& rows, int32_t* recomputed);
  // A chunk's K/V computed standalone after `anchor` in the scratch pool, tagged with `salt`.
  Result<std::shared_ptr<const ChunkKv>> compute_chunk(std::span<const int32_t> anchor, uint64_t salt,
                                                       std::span<const int32_t> chunk);

  const Model& model_;
  ModelConfig cfg_;
  KvPool pool_;
  kernels::Isa isa_;
  std::unique_ptr<kernels::ThreadPool> threads_;
  std::vector<std::unique_ptr<kernels::ThreadPool>> share_pools_;  // [n]: n threads, for thread shares < 1
  Scratch s_;
  std::vector<MlaAbsorbed> mla_absorbed_;  // per layer, MLA latent cache only (mla.cpp)
  int32_t mla_expand_rows_ = kMlaExpandRowsDefault;
  struct WeightKey {  // packed_: (data, rows), a tensor's bytes (an expert's slice of a stacked tensor has its own); hints_: (data, T)
    const void* data;
    int64_t k;
    bool operator==(const WeightKey&) const = default;
  };
  struct WeightKeyHash {
    size_t operator()(const WeightKey& k) const {
      return std::hash<const void*>()(k.data) ^ (std::hash<int64_t>()(k.k) * 0x9E3779B97F4A7C15ull);
    }
  };
  std::unordered_map<WeightKey, kernels::PackedWeights, WeightKeyHash> packed_;  // -> packed copy
  // hint_next's ranges, keyed by (the first weight's data, T) and checked against all the
  // weights: per participant p, ranges[p * kMaxPrefetchRanges, + n[p]); empty where the weights
  // do not run in one matmul_batch on that pool (no hint).
  struct HintRanges {
    static constexpr size_t kMaxWeights = 4;
    kernels::ThreadPool* pool = nullptr;
    size_t n_weights = 0;
    const void* weights[kMaxWeights] = {};
    std::vector<kernels::ThreadPool::PrefetchRange> ranges;
    std::vector<uint8_t> n;
  };
  std::unordered_map<WeightKey, HintRanges, WeightKeyHash> hints_;
  BlendConfig blend_cfg_;
  ChunkKvCache chunk_cache_{BlendConfig{}.cache_bytes};
  BlendStats blend_stats_;
  BlendScratch bs_;
  std::optional<KvPool> blend_pool_;  // f32 scratch pages for standalone chunks
  std::optional<std::vector<int32_t>> blend_pool_anchor_;  // the anchor whose K/V blend_pool_ holds
};

struct Engine::Impl {
  CpuBackend backend;
  StepExecutor exec;  // borrows backend (declared after it)

  Impl(const Model& m, KvPool p, kernels::Isa i, int n_threads) : backend(m, std::move(p), i, n_threads), exec(backend) {}
};

// H2O statistic of one sequence in one layer (key_mass.cpp): rows [0, n_rows) of q are the
// sequence's queries at cache indices start_pos + r; keys are read from the pool (after this
// step's K/V were written); probabilities summed over heads are added to mass[cache index].
struct KeyMassArgs {
  const KvPool* pool = nullptr;
  int32_t layer = 0;
  const float* q = nullptr;
  int64_t q_stride = 0;
  int32_t n_rows = 0;
  int32_t start_pos = 0;
  const int32_t* pages = nullptr;  // the sequence's block table
  int32_t page_size = 0;
  int32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f, softcap = 0.0f;
  int32_t window = 0;
  float* mass = nullptr;
};
void accumulate_key_mass(const KeyMassArgs& args);
// The mixture-of-experts MLP of layer `w` for T normalized rows `xn` ([T, dim], stride dim):
// out[T, dim] = the routed experts' weighted sum (+ the gated shared expert). Routing per token
// (kernels/moe.h); the (token, choice) pairs are grouped by expert and each active expert runs
// one matmul over all of its rows, so a batched step reads each expert's weights once. The
// matmuls of all active experts go into one parallel region (threads split across experts and
// row chunks). The sum over a token's choices runs in choice order (llama.cpp's order).
// packed(t): matrix t's load-time packed copy (CpuBackend::packed_for: each expert's own), or null.
void moe_ffn(const ModelConfig& c, const LayerWeights& w, const float* xn, int64_t T, float* out, MoeScratch& s,
             kernels::ThreadPool* tp, kernels::Isa isa,
             const std::function<const kernels::PackedWeights*(const Tensor&)>& packed);

// The RoPE table of the latent attention's rope part ([n, rope_dim]: cos, sin per adjacent
// pair), with llama.cpp's YaRN when config.rope_yarn (ggml's rope_yarn: ramp between the
// corrected dimensions for beta_fast 32 / beta_slow 1, its magnitude scale).
void mla_rope_table(const ModelConfig& c, const int32_t* positions, int64_t n, float* cos_sin);
// The same table for any rotated width `n_dims` ([n, n_dims]), ggml's rope_ext with ext_factor 1
// when config.rope_yarn, attention factor `attn_factor` (config.rope_attn_factor outside
// DeepSeek) and the frequency factors if any: the plain attention's table of a YaRN or LongRoPE model.
void yarn_rope_table(const ModelConfig& c, const int32_t* positions, int64_t n, int n_dims, float attn_factor, float* cos_sin);

// Checks that the model's tensors have the shapes and dtypes the forward pass needs.
Status check_model(const Model& model);

// kUnsupported naming the first family feature (docs/models.md, "Model families") that a
// backend with only the plain Llama forward pass lacks: RoPE frequency factors or scaling,
// embedding scaling, a custom attention scale, soft-capping, sliding windows, post-norms,
// GeGLU, a mixture-of-experts MLP. `backend` starts the message ("CUDA backend").
Status check_plain_llama(const ModelConfig& config, const std::string& backend);

}  // namespace tessera::worker
