// A loaded Llama-family model: its configuration, its weight tensors and the vocabulary
// embedded in the file (if any). One interface for the three formats (GGUF, Hugging Face
// safetensors directory, llama2.c checkpoint): load_model() detects the format.
//
// Conventions every loader normalizes to (so the forward pass never branches on format):
// - A linear weight is a 2-D Tensor [rows = out_features, cols = in_features], row-major:
//   y[r] = sum_c W[r, c] * x[c]. Quantized dtypes are blocked along cols.
// - Norm weights and biases are always F32 (converted at load if stored otherwise).
// - A fused tensor (Phi-3 attn_qkv, ffn_up holding gate and up) becomes views of its row ranges:
//   wq/wk/wv and w_gate/w_up point into the one stored tensor (no copy).
// - Norm weights are used as stored: x / rms(x) * w (Gemma's converter already stores 1 + w).
// - RoPE: `config.rope_layout` says how the Q/K head dimensions pair up for rotation *as the
//   weights are stored* (llama2.c and GGUF `llama` interleave pairs; HF and GGUF `qwen2`
//   rotate halves). The forward pass applies the rotation in that layout.
//
// Ownership: Model owns every byte its Tensors point to (an mmap of the file and/or
// converted buffers); Tensors are views valid for the Model's lifetime. Model is immutable
// after load and safe to read from many threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/common/dtype.h"
#include "tessera/common/result.h"
#include "tessera/common/vocab.h"

namespace tessera {

// How a backend runs the matmuls of one tensor, as placement rules chose (tessera/placement/
// placement.h); the defaults mean "as the backend decides". Backends other than cpu ignore it.
enum class MatmulPath : uint8_t {
  kBackend = 0,  // the backend's kernel path (the worker's detected or --isa path)
  kScalar = 1,   // these force one CPU kernel path for this tensor (the placement checked the CPU runs it)
  kAvx2 = 2,
  kAvx512 = 3,
};
struct TensorExec {
  MatmulPath path = MatmulPath::kBackend;
  float thread_share = 1.0f;  // (0, 1]: the share of the backend's threads its matmuls use
};

// A read-only view of a weight tensor. 1-D tensors have rows == 1.
struct Tensor {
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;  // rows * dtype_row_bytes(dtype, cols) bytes, owned by the Model
  TensorExec exec;             // placement's execution choice (views of a fused tensor share it)
  bool empty() const { return data == nullptr; }
  const float* f32() const { return static_cast<const float*>(data); }  // only when dtype == kF32
};

enum class RopeLayout : uint8_t {
  kInterleaved = 0,  // rotate (x[2i], x[2i+1]) by theta_i   (llama2.c, GGUF llama)
  kHalves = 1,       // rotate (x[i], x[i + d/2]) by theta_i  (HF, GGUF qwen2 / NEOX)
};

enum class ModelFormat : uint8_t { kGguf, kSafetensors, kLlama2c };
const char* model_format_name(ModelFormat f);

// The MLP's activation: gate' = act(gate) * up.
enum class FfnActivation : uint8_t {
  kSilu = 0,      // SwiGLU (Llama, Mistral, Qwen2, Phi-3)
  kGeluTanh = 1,  // GeGLU with the tanh approximation of GELU (Gemma 2)
};

struct ModelConfig {
  std::string architecture = "llama";  // llama | mistral | qwen2 | qwen2moe | qwen3 | qwen3moe | gemma2 | phi3
  // The model family as far as the file tells (for display): gemma2, phi3, qwen2, llama3 (a
  // llama with rope_freqs), or from general.name (smollm2, mistral, qwen2.5, llama3...), else
  // the architecture.
  std::string family;
  int32_t dim = 0;                     // hidden size
  int32_t hidden_dim = 0;              // MLP intermediate size
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;  // usually dim / n_heads
  int32_t vocab_size = 0;
  int32_t max_seq_len = 0;  // context length stated by the file
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeLayout rope_layout = RopeLayout::kInterleaved;
  bool attn_bias = false;       // Q/K/V carry biases (qwen2)
  // Per-head RMSNorm of Q and K after their projections, before RoPE (Qwen3: attn_q_norm /
  // attn_k_norm, [head_dim] weights shared by the heads; eps rms_eps).
  bool qk_norm = false;
  bool tied_embeddings = false;  // output head == token embedding

  // Family features. The defaults are a plain Llama; docs/models.md lists which family sets what.
  // RoPE frequency i (of head_dim / 2) is theta^(-2i/head_dim) / rope_freq_factors[i] (Llama 3.x
  // `rope_freqs`; empty = all 1), and positions are multiplied by rope_freq_scale (linear scaling).
  std::vector<float> rope_freq_factors;
  float rope_freq_scale = 1.0f;
  // cos and sin of every rotation multiplied by this (llama.cpp's rope.scaling.attn_factor, which
  // LongRoPE files carry: sqrt(1 + ln(context / original) / ln(original))); 1 = plain.
  float rope_attn_factor = 1.0f;
  bool rope_longrope = false;       // rope_freq_factors are LongRoPE's (for inspect)
  bool rope_longrope_long = false;  // ... the long ones
  float embedding_scale = 1.0f;  // token embeddings are multiplied by this (Gemma: sqrt(dim))
  float attn_scale = 0.0f;       // scores = q.k * attn_scale; 0 means 1 / sqrt(head_dim)
  float attn_softcap = 0.0f;     // scores = cap * tanh(scores / cap) before the softmax; 0 = none
  float final_softcap = 0.0f;    // logits = cap * tanh(logits / cap); 0 = none
  // Sliding-window attention: a query at position p sees keys at positions (p - window, p].
  // 0 = full attention. swa_every: 1 = every layer, 2 = the even layers (Gemma 2: 0, 2, 4, ...).
  int32_t sliding_window = 0;
  int32_t swa_every = 1;
  bool post_norms = false;       // RMSNorm after attention and after the MLP, before each residual add (Gemma 2)
  FfnActivation ffn_act = FfnActivation::kSilu;

  // Mixture of experts (Mixtral: `llama` with <arch>.expert_count; Qwen2-MoE: `qwen2moe`;
  // Qwen3-MoE: `qwen3moe`, renormalized like Mixtral, no shared expert). With
  // n_experts > 0 every layer's MLP is routed: per token, the router's logits over the experts
  // go through a softmax over all experts, the n_experts_used most probable are chosen, and
  // their outputs are summed weighted by their probabilities (renormalized over the chosen when
  // expert_weights_norm: Mixtral's softmax over the chosen k). A shared expert
  // (shared_expert_hidden_dim > 0, Qwen2-MoE) runs on every token, scaled by
  // sigmoid(ffn_gate_inp_shexp . x), and is added to the routed sum. hidden_dim is then unused.
  int32_t n_experts = 0;
  int32_t n_experts_used = 0;
  int32_t expert_hidden_dim = 0;         // each routed expert's intermediate size
  int32_t shared_expert_hidden_dim = 0;  // 0 = no shared expert
  bool expert_weights_norm = false;
  // DeepSeek-V2 (`deepseek2`): the chosen weights are multiplied by this after the optional
  // renormalization (expert_weights_scale); the first n_dense_lead layers have a dense MLP of
  // hidden_dim (leading_dense_block_count); the shared expert has no gate when its gate tensor
  // is absent (LayerWeights::ffn_gate_inp_shexp empty).
  float expert_weights_scale = 1.0f;
  int32_t n_dense_lead = 0;
  // DeepSeek-V3 routing (deepseek2 with expert_gating_func 2): sigmoid scores, the selection
  // bias LayerWeights::ffn_exp_probs_b, top k among the experts of the n_expert_groups_used
  // best of n_expert_groups groups (kernels::moe_route_sigmoid); weights renormalized with
  // expert_weights_norm, then x expert_weights_scale (routed_scaling_factor).
  bool expert_sigmoid = false;
  int32_t n_expert_groups = 1, n_expert_groups_used = 1;

  // Multi-head latent attention (DeepSeek-V2, kv_lora_rank > 0): K and V come from a compressed
  // latent c = RMSNorm(attn_kv_a_mqa . x)[:kv_lora_rank] (attn_kv_a_norm) through attn_kv_b;
  // each head's K is [k_nope (head_dim - rope_dim), k_pe (rope_dim)] where k_pe is one RoPE'd
  // vector shared by the heads (the last rope_dim rows of attn_kv_a_mqa), Q is [q_nope, q_pe]
  // (attn_q, or attn_q_a -> attn_q_a_norm -> attn_q_b when q_lora_rank > 0), and V has
  // v_head_dim values. RoPE (adjacent pairs) applies to the rope_dim part only. The K/V cache
  // holds the decompressed per-head K and V (V zero-padded to head_dim), n_kv_heads == n_heads.
  int32_t kv_lora_rank = 0;
  int32_t q_lora_rank = 0;
  int32_t rope_dim = 0;     // qk_rope_head_dim (rope.dimension_count)
  int32_t v_head_dim = 0;   // attention.value_length
  // YaRN RoPE scaling as llama.cpp applies it (rope.scaling.type yarn; ggml's rope_yarn): with
  // rope_freq_scale = 1 / factor, ext_factor 1, beta_fast 32, beta_slow 1, the original context
  // yarn_orig_ctx; DeepSeek-V2 also scales attention by mscale^2 (rope.scaling.yarn_log_multiplier).
  bool rope_yarn = false;
  int32_t yarn_orig_ctx = 0;
  float yarn_log_mul = 0.0f;

  bool is_moe() const { return n_experts > 0; }
  bool is_mla() const { return kv_lora_rank > 0; }
  // Whether layer `l` has the routed MLP (DeepSeek-V2's first n_dense_lead layers are dense).
  bool layer_is_moe(int32_t l) const { return is_moe() && l >= n_dense_lead; }
  // Whether layer `l` uses the sliding window.
  bool layer_uses_swa(int32_t l) const { return sliding_window > 0 && l % swa_every == 0; }
};

struct LayerWeights {
  Tensor attn_norm;           // [1, dim] F32
  Tensor wq, wk, wv, wo;      // [n_heads*head_dim, dim], [n_kv*hd, dim], [n_kv*hd, dim], [dim, n_heads*hd]
  Tensor bq, bk, bv;          // [1, out] F32, empty unless config.attn_bias
  Tensor attn_q_norm, attn_k_norm;  // [1, head_dim] F32, only when config.qk_norm (Qwen3)
  // Multi-head latent attention (config.is_mla(); wk/wv empty, wq empty with a q LoRA; wo is
  // [dim, n_heads * v_head_dim]).
  Tensor attn_q_a, attn_q_a_norm, attn_q_b;  // [q_lora, dim], [1, q_lora] F32, [n_heads*head_dim, q_lora]
  Tensor attn_kv_a_mqa;                      // [kv_lora_rank + rope_dim, dim]
  Tensor attn_kv_a_norm;                     // [1, kv_lora_rank] F32
  Tensor attn_kv_b;                          // [n_heads * (head_dim - rope_dim + v_head_dim), kv_lora_rank]
  Tensor ffn_norm;            // [1, dim] F32
  Tensor w_gate, w_up;        // [hidden_dim, dim]  (HF gate_proj/up_proj, llama2.c w1/w3)
  Tensor w_down;              // [dim, hidden_dim]  (HF down_proj, llama2.c w2)
  Tensor attn_post_norm;      // [1, dim] F32, only when config.post_norms (Gemma 2 post_attention_norm)
  Tensor ffn_post_norm;       // [1, dim] F32, only when config.post_norms (Gemma 2 post_ffw_norm)

  // Mixture of experts (config.is_moe(); w_gate/w_up/w_down are then empty). Field names are
  // the GGUF tensor names (blk.N.<name>.weight), so that a placement rule can address each by
  // name. A stacked expert tensor (GGUF 3-D [cols, rows, n_experts]) is one Tensor of
  // n_experts * rows rows: expert e's matrix is rows [e * rows, (e + 1) * rows) (expert_matrix()).
  Tensor ffn_gate_inp;                  // [n_experts, dim] router, any matmul dtype (llama.cpp keeps it F32)
  Tensor ffn_gate_exps, ffn_up_exps;    // [n_experts * expert_hidden_dim, dim]
  Tensor ffn_down_exps;                 // [n_experts * dim, expert_hidden_dim]
  Tensor ffn_gate_inp_shexp;            // [1, dim] F32, the shared expert's sigmoid gate (Qwen2-MoE)
  Tensor ffn_exp_probs_b;               // [1, n_experts] F32, DeepSeek-V3's selection bias (optional)
  Tensor ffn_gate_shexp, ffn_up_shexp;  // [shared_expert_hidden_dim, dim], empty without a shared expert
  Tensor ffn_down_shexp;                // [dim, shared_expert_hidden_dim]
};

// Expert e's [stacked.rows / n_experts, cols] matrix of a stacked expert tensor (a view).
inline Tensor expert_matrix(const Tensor& stacked, int64_t n_experts, int64_t e) {
  const int64_t rows = stacked.rows / n_experts;
  return Tensor{.dtype = stacked.dtype, .rows = rows, .cols = stacked.cols,
                .data = static_cast<const uint8_t*>(stacked.data) +
                        static_cast<size_t>(e * rows) * dtype_row_bytes(stacked.dtype, stacked.cols),
                .exec = stacked.exec};
}


class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }
  ModelFormat format() const { return format_; }
  const std::string& path() const { return path_; }

  Tensor tok_embeddings;  // [vocab, dim]
  Tensor final_norm;      // [1, dim] F32
  Tensor output;          // [vocab, dim]; equals tok_embeddings when tied
  std::vector<LayerWeights> layers;
  VocabSpec vocab;

  // 64-bit identity of the weights (format-independent content hash of config + a sample of
  // tensor bytes), used in radix namespaces and kvstore keys. Stable across runs.
  uint64_t fingerprint = 0;

  int64_t parameter_count() const;
  // Whether [p, p + n) lies in a read-only file mapping of this model (mmap'ed loading): pages
  // there may be dropped (madvise MADV_DONTNEED) and are read back from the file when touched
  // again. False for converted or heap-loaded tensors.
  virtual bool file_mapped(const void* p, size_t n) const {
    (void)p;
    (void)n;
    return false;
  }

 protected:
  ModelConfig config_;
  ModelFormat format_ = ModelFormat::kGguf;
  std::string path_;
};

// One tensor of a model file as a placer sees it: its canonical (GGUF) name, stored dtype and
// shape (outermost first: a matrix is {rows, cols}, MoE experts {n_expert, rows, cols}).
struct TensorDesc {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};
// A placer's choice for one tensor: the dtype it is converted to at load (== the stored dtype:
// kept as stored) and how it runs.
struct TensorChoice {
  DType dtype = DType::kF32;
  TensorExec exec;
};
// Called once per load, after the config is read and before the model is assembled, with every
// tensor of the file; returns one choice per tensor (same order) or an error, which fails the
// load. The loader converts the tensors whose dtype changes (dequantize, then ggml's reference
// quantizer: tessera/common/quants.h). tessera/placement/placement.h builds one from rules.
using TensorPlacer = std::function<Result<std::vector<TensorChoice>>(const ModelConfig&, std::span<const TensorDesc>)>;

struct LoadOptions {
  bool use_mmap = true;  // map the file instead of reading it (GGUF, safetensors, llama2.c)
  TensorPlacer placer;   // empty: every tensor as stored (no conversion, backend's choices)
};

// Detects the format (directory with config.json -> safetensors; "GGUF" magic -> GGUF;
// otherwise llama2.c) and loads it. Errors name the file, the tensor or key, and the problem.
Result<std::unique_ptr<Model>> load_model(const std::string& path, const LoadOptions& options = {});

// The vocabulary (and chat template) a model file embeds, read from its metadata without
// loading any tensor: a GGUF file's tokenizer.ggml.* keys. An empty VocabSpec (no tokens) for
// a llama2.c checkpoint or a safetensors directory, whose tokenizer is a separate file.
// Errors as load_model for an unreadable or corrupt file.
Result<VocabSpec> read_model_vocab(const std::string& path);

}  // namespace tessera
