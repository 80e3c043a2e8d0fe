// Synthetic in-memory Llama-family models for engine tests: random weights in a chosen dtype,
// any GQA ratio, either RoPE layout, optional Q/K/V bias, tied or untied output head.
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tessera/common/quants.h"
#include "tessera/kernels/ops.h"
#include "tessera/model/model.h"

namespace tessera::worker::testing {

struct SynthSpec {
  int32_t dim = 64;
  int32_t hidden_dim = 96;
  int32_t n_layers = 2;
  int32_t n_heads = 4;
  int32_t n_kv_heads = 2;
  int32_t head_dim = 16;
  int32_t vocab_size = 97;
  DType dtype = DType::kF32;  // linear weights and embeddings
  RopeLayout rope_layout = RopeLayout::kInterleaved;
  bool attn_bias = false;
  bool tied = false;
  uint64_t seed = 1;

  std::string name() const {
    return std::string(dtype_name(dtype)) + " heads=" + std::to_string(n_heads) + "/" + std::to_string(n_kv_heads) +
           (rope_layout == RopeLayout::kInterleaved ? " interleaved" : " halves") + (attn_bias ? " bias" : "") +
           (tied ? " tied" : "");
  }
};

class SynthModel final : public Model {
 public:
  explicit SynthModel(const SynthSpec& s) : rng_(s.seed) {
    config_.architecture = s.attn_bias ? "qwen2" : "llama";
    config_.dim = s.dim;
    config_.hidden_dim = s.hidden_dim;
    config_.n_layers = s.n_layers;
    config_.n_heads = s.n_heads;
    config_.n_kv_heads = s.n_kv_heads;
    config_.head_dim = s.head_dim;
    config_.vocab_size = s.vocab_size;
    config_.max_seq_len = 4096;
    config_.rope_layout = s.rope_layout;
    config_.attn_bias = s.attn_bias;
    config_.tied_embeddings = s.tied;
    config_.rope_theta = 10000.0f;
    path_ = "synthetic:" + s.name();
    const int32_t q_dim = s.n_heads * s.head_dim, kv_dim = s.n_kv_heads * s.head_dim;
    tok_embeddings = make(s.dtype, s.vocab_size, s.dim, 1.0f);
    final_norm = norm(s.dim);
    output = s.tied ? tok_embeddings : make(s.dtype, s.vocab_size, s.dim, 1.0f / std::sqrt(static_cast<float>(s.dim)));
    for (int32_t l = 0; l < s.n_layers; ++l) {
      LayerWeights w;
      const float in_scale = 1.0f / std::sqrt(static_cast<float>(s.dim));
      w.attn_norm = norm(s.dim);
      w.ffn_norm = norm(s.dim);
      // Larger Q/K weights make the attention distributions peaky (a harder test).
      w.wq = make(s.dtype, q_dim, s.dim, 3.0f * in_scale);
      w.wk = make(s.dtype, kv_dim, s.dim, 3.0f * in_scale);
      w.wv = make(s.dtype, kv_dim, s.dim, in_scale);
      w.wo = make(s.dtype, s.dim, q_dim, 1.0f / std::sqrt(static_cast<float>(q_dim)));
      w.w_gate = make(s.dtype, s.hidden_dim, s.dim, in_scale);
      w.w_up = make(s.dtype, s.hidden_dim, s.dim, in_scale);
      w.w_down = make(s.dtype, s.dim, s.hidden_dim, 1.0f / std::sqrt(static_cast<float>(s.hidden_dim)));
      if (s.attn_bias) {
        w.bq = make(DType::kF32, 1, q_dim, 0.5f);
        w.bk = make(DType::kF32, 1, kv_dim, 0.5f);
        w.bv = make(DType::kF32, 1, kv_dim, 0.5f);
      }
      layers.push_back(w);
    }
  }

 private:
  Tensor norm(int32_t dim) {
    Tensor t = make(DType::kF32, 1, dim, 0.2f);
    float* p = const_cast<float*>(t.f32());
    for (int32_t i = 0; i < dim; ++i) p[i] += 1.0f;
    return t;
  }

  // Uniform in [-scale, scale], stored in dtype (quantized/rounded from f32).
  Tensor make(DType dtype, int64_t rows, int64_t cols, float scale) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> f(static_cast<size_t>(rows * cols));
    for (auto& v : f) v = dist(rng_);
    const size_t rb = dtype_row_bytes(dtype, cols);
    auto& buf = storage_.emplace_back(rb * static_cast<size_t>(rows) + 64);
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* dst = buf.data() + static_cast<size_t>(r) * rb;
      const float* src = f.data() + r * cols;
      switch (dtype) {
        case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(cols) * 4); break;
        case DType::kF16:
        case DType::kBF16:
          for (int64_t c = 0; c < cols; ++c) {
            const uint16_t h = dtype == DType::kF16 ? kernels::f32_to_fp16(src[c]) : kernels::f32_to_bf16(src[c]);
            std::memcpy(dst + 2 * c, &h, 2);
          }
          break;
        case DType::kQ8_0: kernels::quantize_row_q8_0(src, dst, cols); break;
        default: tessera::quantize_row(dtype, src, dst, cols); break;  // the other ggml block formats
      }
    }
    return Tensor{.dtype = dtype, .rows = rows, .cols = cols, .data = buf.data()};
  }

  std::mt19937_64 rng_;
  std::vector<std::vector<uint8_t>> storage_;
};

// A block table of `pages` distinct pages drawn (deterministically) from a pool of `pool_pages`,
// and the matching slot mapping of positions [start, start + n).
struct Placement {
  std::vector<int32_t> block_table;
  std::vector<int64_t> slots(int32_t start, int32_t n, int32_t page_size) const {
    std::vector<int64_t> out;
    for (int32_t p = start; p < start + n; ++p) {
      out.push_back(static_cast<int64_t>(block_table[static_cast<size_t>(p / page_size)]) * page_size + p % page_size);
    }
    return out;
  }
};

}  // namespace tessera::worker::testing
