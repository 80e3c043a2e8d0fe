// The CPU per-rank forward that checks the tensor-parallel cut; see tensor_parallel.h.
#include <cmath>
#include <cstring>

#include "tensor_parallel.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/isa.h"
#include "tessera/kernels/matmul.h"
#include "tessera/kernels/ops.h"

namespace tessera::worker::tp {

Result<std::vector<float>> cpu_rank_forward(const ShardModel& m, std::span<const int32_t> tokens, Communicator& comm) {
  const ModelConfig& c = m.config();
  if (tokens.empty()) return make_error(ErrorCode::kInvalidArgument, "cpu_rank_forward: no tokens");
  for (int32_t t : tokens) {
    if (t < 0 || t >= c.vocab_size) {
      return make_error(ErrorCode::kOutOfRange, "cpu_rank_forward: token " + std::to_string(t) + " outside the vocabulary");
    }
  }
  const kernels::Isa isa = kernels::detect_isa();
  const int64_t n = static_cast<int64_t>(tokens.size()), dim = c.dim, hd = c.head_dim, hidden = c.hidden_dim;
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * hd, kv_dim = static_cast<int64_t>(c.n_kv_heads) * hd;
  std::vector<float> x(static_cast<size_t>(n * dim)), xn(x.size()), o(x.size()), q(static_cast<size_t>(n * q_dim)),
      att(q.size()), gate(static_cast<size_t>(n * hidden)), up(gate.size()), cs(static_cast<size_t>(n * hd));
  // One page holding all n positions: [1, 2, n, n_kv_heads, head_dim] (K then V).
  std::vector<float> kv(static_cast<size_t>(2 * n * kv_dim));
  float* k = kv.data();
  float* v = kv.data() + n * kv_dim;
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) positions[static_cast<size_t>(t)] = static_cast<int32_t>(t);
  const size_t emb_row = dtype_row_bytes(m.tok_embeddings.dtype, dim);
  for (int64_t t = 0; t < n; ++t) {
    kernels::dequantize_row(m.tok_embeddings.dtype,
                            static_cast<const uint8_t*>(m.tok_embeddings.data) + static_cast<size_t>(tokens[static_cast<size_t>(t)]) * emb_row,
                            x.data() + t * dim, dim);
  }
  kernels::rope_table(positions.data(), n, hd, c.rope_theta, cs.data());
  const bool interleaved = c.rope_layout == RopeLayout::kInterleaved;
  auto linear = [&](const Tensor& w, const float* in, float* out) {
    kernels::matmul({.w_type = w.dtype, .w = w.data, .rows = w.rows, .cols = w.cols, .x = in, .x_stride = w.cols, .n = n,
                     .y = out, .y_stride = w.rows},
                    nullptr, isa);
  };
  auto add_bias = [&](const Tensor& b, float* out, int64_t width) {
    if (b.empty()) return;
    for (int64_t t = 0; t < n; ++t) kernels::add_inplace(out + t * width, b.f32(), width);
  };
  const int32_t token_indptr[2] = {0, static_cast<int32_t>(n)}, start_pos[1] = {0}, page_indptr[2] = {0, 1}, page_ids[1] = {0};
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = m.layers[static_cast<size_t>(l)];
    kernels::rmsnorm(x.data(), dim, w.attn_norm.f32(), xn.data(), dim, n, dim, c.rms_eps);
    linear(w.wq, xn.data(), q.data());
    linear(w.wk, xn.data(), k);
    linear(w.wv, xn.data(), v);
    add_bias(w.bq, q.data(), q_dim);
    add_bias(w.bk, k, kv_dim);
    add_bias(w.bv, v, kv_dim);
    kernels::rope(q.data(), q_dim, n, c.n_heads, hd, cs.data(), interleaved);
    kernels::rope(k, kv_dim, n, c.n_kv_heads, hd, cs.data(), interleaved);
    kernels::paged_attention({.q = q.data(), .q_stride = q_dim, .out = att.data(), .out_stride = q_dim, .kv = kv.data(),
                              .page_size = static_cast<int32_t>(n), .n_heads = c.n_heads, .n_kv_heads = c.n_kv_heads,
                              .head_dim = c.head_dim, .scale = 1.0f / std::sqrt(static_cast<float>(hd)), .n_seqs = 1,
                              .token_indptr = token_indptr, .start_pos = start_pos, .page_indptr = page_indptr,
                              .page_ids = page_ids},
                             nullptr, isa);
    linear(w.wo, att.data(), o.data());  // row-parallel: a partial sum
    TS_TRY(comm.all_reduce_sum(o));
    kernels::add_inplace(x.data(), o.data(), n * dim);
    kernels::rmsnorm(x.data(), dim, w.ffn_norm.f32(), xn.data(), dim, n, dim, c.rms_eps);
    linear(w.w_gate, xn.data(), gate.data());
    linear(w.w_up, xn.data(), up.data());
    kernels::silu_mul(gate.data(), hidden, up.data(), hidden, gate.data(), hidden, n, hidden);
    linear(w.w_down, gate.data(), o.data());  // row-parallel: a partial sum
    TS_TRY(comm.all_reduce_sum(o));
    kernels::add_inplace(x.data(), o.data(), n * dim);
  }
  kernels::rmsnorm(x.data(), dim, m.final_norm.f32(), xn.data(), dim, n, dim, c.rms_eps);
  std::vector<float> logits(static_cast<size_t>(n * c.vocab_size));
  kernels::matmul({.w_type = m.output.dtype, .w = m.output.data, .rows = c.vocab_size, .cols = dim, .x = xn.data(),
                   .x_stride = dim, .n = n, .y = logits.data(), .y_stride = c.vocab_size},
                  nullptr, isa);
  return logits;
}

}  // namespace tessera::worker::tp
