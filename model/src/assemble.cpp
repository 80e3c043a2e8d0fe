// Shape/dtype validation and assembly of a Model from a TensorMap (see loaded_model.h).
#include <cmath>
#include <cstring>
#include <new>
#include <sstream>

#include "half.h"
#include "loaded_model.h"

namespace tessera::loaders {
namespace {

constexpr std::align_val_t kAlign{64};

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

Error corrupt(const std::string& file, const std::string& what) {
  return make_error(ErrorCode::kCorruptFile, file + ": " + what);
}

size_t dtype_alignment(DType t) { return t == DType::kF32 ? 4 : 2; }

class Assembler {
 public:
  Assembler(LoadedModel& model, const TensorMap& tensors, const std::string& file)
      : model_(model), tensors_(tensors), file_(file) {}

  // A weight matrix [rows, cols] in any supported dtype.
  Result<Tensor> matrix(const std::string& name, int64_t rows, int64_t cols) {
    TS_ASSIGN_OR_RETURN(const RawTensor* raw, find(name));
    if (!(raw->shape.size() == 2 && raw->shape[0] == rows && raw->shape[1] == cols)) {
      return corrupt(file_, "tensor " + raw->name + " has shape " + shape_str(raw->shape) + ", expected " +
                                shape_str({rows, cols}) + " from the model config");
    }
    TS_TRY(check_bytes(*raw, rows, cols));
    Tensor t{.dtype = raw->dtype, .rows = rows, .cols = cols, .data = raw->data, .exec = raw->exec};
    if (reinterpret_cast<uintptr_t>(raw->data) % dtype_alignment(raw->dtype) != 0) {
      uint8_t* copy = model_.allocate(raw->nbytes);
      std::memcpy(copy, raw->data, raw->nbytes);
      t.data = copy;
    }
    return t;
  }

  // A 1-D vector of n values (norm weight or bias), converted to F32.
  Result<Tensor> vector_f32(const std::string& name, int64_t n) {
    TS_ASSIGN_OR_RETURN(const RawTensor* raw, find(name));
    const bool ok_shape = (raw->shape.size() == 1 && raw->shape[0] == n) ||
                          (raw->shape.size() == 2 && raw->shape[0] == 1 && raw->shape[1] == n);
    if (!ok_shape) {
      return corrupt(file_, "tensor " + raw->name + " has shape " + shape_str(raw->shape) + ", expected " +
                                shape_str({n}) + " from the model config");
    }
    if (raw->dtype != DType::kF32 && raw->dtype != DType::kF16 && raw->dtype != DType::kBF16) {
      return make_error(ErrorCode::kUnsupported, file_ + ": tensor " + raw->name + " has dtype " +
                                                     dtype_name(raw->dtype) +
                                                     "; norm weights and biases must be f32, f16 or bf16");
    }
    TS_TRY(check_bytes(*raw, 1, n));
    Tensor t{.dtype = DType::kF32, .rows = 1, .cols = n, .data = raw->data};
    if (raw->dtype == DType::kF32 && reinterpret_cast<uintptr_t>(raw->data) % 4 == 0) return t;
    auto* out = reinterpret_cast<float*>(model_.allocate(static_cast<size_t>(n) * sizeof(float)));
    values_to_f32(*raw, n, out);
    t.data = out;
    return t;
  }

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }

  // A stacked expert tensor [n_experts, rows, cols] (GGUF ne {cols, rows, n_experts}) as one
  // [n_experts * rows, cols] Tensor (see LayerWeights).
  Result<Tensor> experts(const std::string& name, int64_t n_experts, int64_t rows, int64_t cols) {
    TS_ASSIGN_OR_RETURN(const RawTensor* raw, find(name));
    const bool one = n_experts == 1 && raw->shape.size() == 2 && raw->shape[0] == rows && raw->shape[1] == cols;
    if (!one && !(raw->shape.size() == 3 && raw->shape[0] == n_experts && raw->shape[1] == rows && raw->shape[2] == cols)) {
      return corrupt(file_, "tensor " + raw->name + " has shape " + shape_str(raw->shape) + ", expected " +
                                shape_str({n_experts, rows, cols}) + " from the model config");
    }
    TS_TRY(check_bytes(*raw, n_experts * rows, cols));
    Tensor t{.dtype = raw->dtype, .rows = n_experts * rows, .cols = cols, .data = raw->data, .exec = raw->exec};
    if (reinterpret_cast<uintptr_t>(raw->data) % dtype_alignment(raw->dtype) != 0) {
      uint8_t* copy = model_.allocate(raw->nbytes);
      std::memcpy(copy, raw->data, raw->nbytes);
      t.data = copy;
    }
    return t;
  }

  // Rows [row0, row0 + rows) of a fused matrix (Phi-3 attn_qkv, ffn_up), as a view.
  static Tensor rows_of(const Tensor& fused, int64_t row0, int64_t rows) {
    const size_t rb = dtype_row_bytes(fused.dtype, fused.cols);
    return Tensor{.dtype = fused.dtype, .rows = rows, .cols = fused.cols,
                  .data = static_cast<const uint8_t*>(fused.data) + static_cast<size_t>(row0) * rb, .exec = fused.exec};
  }

 private:
  Result<const RawTensor*> find(const std::string& name) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return corrupt(file_, "missing tensor " + name);
    return &it->second;
  }

  Status check_bytes(const RawTensor& raw, int64_t rows, int64_t cols) {
    if (cols % dtype_block_size(raw.dtype) != 0) {
      return corrupt(file_, "tensor " + raw.name + ": row length " + std::to_string(cols) +
                                " is not a multiple of the " + dtype_name(raw.dtype) + " block size");
    }
    uint64_t need = 0;
    if (mul_overflows(static_cast<uint64_t>(rows), dtype_row_bytes(raw.dtype, cols), &need) || need != raw.nbytes) {
      return corrupt(file_, "tensor " + raw.name + " holds " + std::to_string(raw.nbytes) +
                                " bytes, its shape and dtype need " + std::to_string(need));
    }
    return ok_status();
  }

  LoadedModel& model_;
  const TensorMap& tensors_;
  const std::string& file_;
};

Status check_positive(const std::string& file, const char* field, int64_t v, int64_t cap) {
  if (v <= 0 || v > cap) {
    return corrupt(file, std::string("model config ") + field + " = " + std::to_string(v) + " is out of range [1, " +
                             std::to_string(cap) + "]");
  }
  return ok_status();
}

}  // namespace

void LoadedModel::AlignedDelete::operator()(uint8_t* p) const { ::operator delete(p, kAlign); }

uint8_t* LoadedModel::allocate(size_t bytes) {
  auto* p = static_cast<uint8_t*>(::operator new(bytes == 0 ? 1 : bytes, kAlign));
  std::memset(p, 0, bytes);
  buffers_.emplace_back(p);
  return p;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }
bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }

bool architecture_supported(const std::string& a) {
  return a == "llama" || a == "mistral" || a == "qwen2" || a == "qwen2moe" || a == "qwen3" || a == "qwen3moe" ||
         a == "deepseek2" || a == "gemma2" || a == "phi3";
}
std::string supported_architectures() { return "llama, mistral, qwen2, qwen2moe, qwen3, qwen3moe, deepseek2, gemma2, phi3"; }

void values_to_f32(const RawTensor& t, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = t.data + i * static_cast<int64_t>(t.dtype == DType::kF32 ? 4 : 2);
    if (t.dtype == DType::kF32) {
      std::memcpy(&out[i], p, 4);
    } else if (t.dtype == DType::kF16) {
      out[i] = fp16_to_f32(load_u16(p));
    } else {
      out[i] = bf16_to_f32(load_u16(p));
    }
  }
}

Status validate_config(const ModelConfig& c, const std::string& file) {
  TS_TRY(check_positive(file, "dim", c.dim, 1 << 17));
  TS_TRY(check_positive(file, "hidden_dim", c.hidden_dim, 1 << 20));
  TS_TRY(check_positive(file, "n_layers", c.n_layers, 1024));
  TS_TRY(check_positive(file, "n_heads", c.n_heads, 4096));
  TS_TRY(check_positive(file, "n_kv_heads", c.n_kv_heads, 4096));
  TS_TRY(check_positive(file, "head_dim", c.head_dim, 4096));
  TS_TRY(check_positive(file, "vocab_size", c.vocab_size, 1 << 24));
  TS_TRY(check_positive(file, "max_seq_len", c.max_seq_len, 1 << 24));
  if (c.n_heads % c.n_kv_heads != 0) {
    return corrupt(file, "model config n_heads = " + std::to_string(c.n_heads) + " is not a multiple of n_kv_heads = " +
                             std::to_string(c.n_kv_heads));
  }
  if (c.head_dim % 2 != 0) return corrupt(file, "model config head_dim = " + std::to_string(c.head_dim) + " is odd (RoPE needs pairs)");
  if (!(std::isfinite(c.rms_eps) && c.rms_eps > 0.0f)) {
    return corrupt(file, "model config rms_eps = " + std::to_string(c.rms_eps) + " must be a positive number");
  }
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0.0f)) {
    return corrupt(file, "model config rope_theta = " + std::to_string(c.rope_theta) + " must be a positive number");
  }
  if (!architecture_supported(c.architecture)) {
    return make_error(ErrorCode::kUnsupported, file + ": architecture '" + c.architecture + "' is not supported (" +
                                                   supported_architectures() + ")");
  }
  if (c.sliding_window < 0 || c.swa_every < 1) return corrupt(file, "model config sliding window is negative");
  if (c.n_experts < 0 || c.n_experts > 4096 || (c.n_experts > 0 && (c.n_experts_used < 1 || c.n_experts_used > c.n_experts))) {
    return corrupt(file, "model config has " + std::to_string(c.n_experts) + " experts with " +
                             std::to_string(c.n_experts_used) + " used per token");
  }
  if (c.n_experts > 0) {
    TS_TRY(check_positive(file, "expert_hidden_dim", c.expert_hidden_dim, 1 << 20));
    if (c.shared_expert_hidden_dim < 0 || c.shared_expert_hidden_dim > (1 << 20)) {
      return corrupt(file, "model config shared_expert_hidden_dim is out of range");
    }
  }
  if (!(std::isfinite(c.rope_attn_factor) && c.rope_attn_factor > 0.0f)) {
    return corrupt(file, "model config RoPE attention factor is not a positive number");
  }
  if (c.is_mla() && (!c.rope_freq_factors.empty() || c.rope_attn_factor != 1.0f)) {  // llama.cpp's build_deepseek2 ignores both
    return make_error(ErrorCode::kUnsupported, file + ": RoPE frequency factors or a RoPE attention factor with multi-head "
                                                      "latent attention are not supported");
  }
  if (!c.rope_freq_factors.empty() && static_cast<int64_t>(c.rope_freq_factors.size()) != c.head_dim / 2) {
    return corrupt(file, "model config has " + std::to_string(c.rope_freq_factors.size()) +
                             " RoPE frequency factors, head_dim / 2 is " + std::to_string(c.head_dim / 2));
  }
  return ok_status();
}

// GCC 12 at -O2 reports a false -Wfree-nonheap-object ("operator delete called on a pointer to
// an unallocated object '1'") in the inlined destructor of the Result<TensorMap> temporary;
// silenced here only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
Status place_into(LoadedModel& model, const TensorMap& file_tensors, const LoadOptions& options, const std::string& file,
                  TensorMap& out) {
  TS_ASSIGN_OR_RETURN(out, place_tensors(model, file_tensors, options.placer, file));
  return ok_status();
}
#pragma GCC diagnostic pop

Status assemble_model(LoadedModel& model, const TensorMap& file_tensors, const std::string& file,
                      const LoadOptions& options) {
  TensorMap placed;
  if (options.placer) TS_TRY(place_into(model, file_tensors, options, file, placed));
  const TensorMap& tensors = options.placer ? placed : file_tensors;
  ModelConfig& c = model.mutable_config();
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  Assembler a(model, tensors, file);
  TS_ASSIGN_OR_RETURN(model.tok_embeddings, a.matrix("token_embd.weight", c.vocab_size, c.dim));
  TS_ASSIGN_OR_RETURN(model.final_norm, a.vector_f32("output_norm.weight", c.dim));
  if (!c.tied_embeddings && a.has("output.weight")) {
    TS_ASSIGN_OR_RETURN(model.output, a.matrix("output.weight", c.vocab_size, c.dim));
  } else {
    c.tied_embeddings = true;
    model.output = model.tok_embeddings;
  }
  model.layers.assign(static_cast<size_t>(c.n_layers), LayerWeights{});
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& w = model.layers[static_cast<size_t>(l)];
    TS_ASSIGN_OR_RETURN(w.attn_norm, a.vector_f32(p + "attn_norm.weight", c.dim));
    if (c.is_mla()) {
      const int64_t nope = c.head_dim - c.rope_dim;
      if (c.q_lora_rank > 0) {
        TS_ASSIGN_OR_RETURN(w.attn_q_a, a.matrix(p + "attn_q_a.weight", c.q_lora_rank, c.dim));
        TS_ASSIGN_OR_RETURN(w.attn_q_a_norm, a.vector_f32(p + "attn_q_a_norm.weight", c.q_lora_rank));
        TS_ASSIGN_OR_RETURN(w.attn_q_b, a.matrix(p + "attn_q_b.weight", q_dim, c.q_lora_rank));
      } else {
        TS_ASSIGN_OR_RETURN(w.wq, a.matrix(p + "attn_q.weight", q_dim, c.dim));
      }
      TS_ASSIGN_OR_RETURN(w.attn_kv_a_mqa, a.matrix(p + "attn_kv_a_mqa.weight", c.kv_lora_rank + c.rope_dim, c.dim));
      TS_ASSIGN_OR_RETURN(w.attn_kv_a_norm, a.vector_f32(p + "attn_kv_a_norm.weight", c.kv_lora_rank));
      TS_ASSIGN_OR_RETURN(w.attn_kv_b, a.matrix(p + "attn_kv_b.weight", int64_t{c.n_heads} * (nope + c.v_head_dim), c.kv_lora_rank));
    } else if (a.has(p + "attn_qkv.weight") && !a.has(p + "attn_q.weight")) {  // Phi-3: Q, K, V rows in one tensor
      TS_ASSIGN_OR_RETURN(Tensor qkv, a.matrix(p + "attn_qkv.weight", q_dim + 2 * kv_dim, c.dim));
      w.wq = Assembler::rows_of(qkv, 0, q_dim);
      w.wk = Assembler::rows_of(qkv, q_dim, kv_dim);
      w.wv = Assembler::rows_of(qkv, q_dim + kv_dim, kv_dim);
    } else {
      TS_ASSIGN_OR_RETURN(w.wq, a.matrix(p + "attn_q.weight", q_dim, c.dim));
      TS_ASSIGN_OR_RETURN(w.wk, a.matrix(p + "attn_k.weight", kv_dim, c.dim));
      TS_ASSIGN_OR_RETURN(w.wv, a.matrix(p + "attn_v.weight", kv_dim, c.dim));
    }
    TS_ASSIGN_OR_RETURN(w.wo, a.matrix(p + "attn_output.weight", c.dim, c.is_mla() ? int64_t{c.n_heads} * c.v_head_dim : q_dim));
    if (c.attn_bias) {
      TS_ASSIGN_OR_RETURN(w.bq, a.vector_f32(p + "attn_q.bias", q_dim));
      TS_ASSIGN_OR_RETURN(w.bk, a.vector_f32(p + "attn_k.bias", kv_dim));
      TS_ASSIGN_OR_RETURN(w.bv, a.vector_f32(p + "attn_v.bias", kv_dim));
    }
    if (c.qk_norm) {
      TS_ASSIGN_OR_RETURN(w.attn_q_norm, a.vector_f32(p + "attn_q_norm.weight", c.head_dim));
      TS_ASSIGN_OR_RETURN(w.attn_k_norm, a.vector_f32(p + "attn_k_norm.weight", c.head_dim));
    }
    TS_ASSIGN_OR_RETURN(w.ffn_norm, a.vector_f32(p + "ffn_norm.weight", c.dim));
    if (c.layer_is_moe(l)) {
      const int64_t ne = c.n_experts, ff = c.expert_hidden_dim, sh = c.shared_expert_hidden_dim;
      TS_ASSIGN_OR_RETURN(w.ffn_gate_inp, a.matrix(p + "ffn_gate_inp.weight", ne, c.dim));
      if (c.expert_sigmoid && a.has(p + "exp_probs_b.bias")) {  // DeepSeek-V3's e_score_correction_bias
        TS_ASSIGN_OR_RETURN(w.ffn_exp_probs_b, a.vector_f32(p + "exp_probs_b.bias", ne));
      }
      TS_ASSIGN_OR_RETURN(w.ffn_gate_exps, a.experts(p + "ffn_gate_exps.weight", ne, ff, c.dim));
      TS_ASSIGN_OR_RETURN(w.ffn_up_exps, a.experts(p + "ffn_up_exps.weight", ne, ff, c.dim));
      TS_ASSIGN_OR_RETURN(w.ffn_down_exps, a.experts(p + "ffn_down_exps.weight", ne, c.dim, ff));
      if (sh > 0) {
        if (c.architecture != "deepseek2") {  // DeepSeek-V2's shared experts are not gated
          TS_ASSIGN_OR_RETURN(w.ffn_gate_inp_shexp, a.vector_f32(p + "ffn_gate_inp_shexp.weight", c.dim));
        }
        TS_ASSIGN_OR_RETURN(w.ffn_gate_shexp, a.matrix(p + "ffn_gate_shexp.weight", sh, c.dim));
        TS_ASSIGN_OR_RETURN(w.ffn_up_shexp, a.matrix(p + "ffn_up_shexp.weight", sh, c.dim));
        TS_ASSIGN_OR_RETURN(w.ffn_down_shexp, a.matrix(p + "ffn_down_shexp.weight", c.dim, sh));
      }
    } else if (!a.has(p + "ffn_gate.weight") && c.architecture == "phi3") {  // ffn_up holds gate rows, then up rows
      TS_ASSIGN_OR_RETURN(Tensor gate_up, a.matrix(p + "ffn_up.weight", 2 * static_cast<int64_t>(c.hidden_dim), c.dim));
      w.w_gate = Assembler::rows_of(gate_up, 0, c.hidden_dim);
      w.w_up = Assembler::rows_of(gate_up, c.hidden_dim, c.hidden_dim);
    } else {
      TS_ASSIGN_OR_RETURN(w.w_gate, a.matrix(p + "ffn_gate.weight", c.hidden_dim, c.dim));
      TS_ASSIGN_OR_RETURN(w.w_up, a.matrix(p + "ffn_up.weight", c.hidden_dim, c.dim));
    }
    if (!c.layer_is_moe(l)) {
      TS_ASSIGN_OR_RETURN(w.w_down, a.matrix(p + "ffn_down.weight", c.dim, c.hidden_dim));
    }
    if (c.post_norms) {
      TS_ASSIGN_OR_RETURN(w.attn_post_norm, a.vector_f32(p + "post_attention_norm.weight", c.dim));
      TS_ASSIGN_OR_RETURN(w.ffn_post_norm, a.vector_f32(p + "post_ffw_norm.weight", c.dim));
    }
  }
  model.fingerprint = compute_fingerprint(model);
  return ok_status();
}

}  // namespace tessera::loaders
