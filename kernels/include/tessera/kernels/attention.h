// Paged causal attention over a ragged batch of sequences (one call per layer and step).
//
// K/V layout of one layer (DESIGN.md, K/V data model):
//   kv[num_pages, 2, page_size, n_kv_heads, row]  (index 0 = K, 1 = V), where a row is one
//   head's head_dim values in the pool's page dtype (kv_format.h: f32, f16 or int8 with
//   per-group scales). The kernels read that format directly, a 16-key block at a time.
// Token position p of a sequence lives in page block_table[p / page_size], offset
// p % page_size. The K/V of the step's own tokens must already be written (the caller writes
// them through its slot mapping before calling), so causality within the step follows from
// each query attending to positions [0, its own position].
// Sliding window (window > 0): keys at positions <= p - window are masked too (llama.cpp's
// `pos - kv_pos >= n_swa`).
// GQA: query head h reads kv head h / (n_heads / n_kv_heads).
// One plane (kv_planes 1, the latent cache of multi-head latent attention): the layout is
// kv[num_pages, 1, page_size, n_kv_heads, row] and each K row is its own V, so out gets the
// probability-weighted sum of the K rows (head_dim values per head).
// Softmax is computed online (running max and sum), in f32.
#pragma once

#include <cstdint>

#include "tessera/kernels/isa.h"
#include "tessera/kernels/kv_format.h"

namespace tessera::kernels {

class ThreadPool;

struct PagedAttentionArgs {
  const float* q = nullptr;     // [n_tokens, n_heads * head_dim], row stride q_stride (RoPE applied)
  int64_t q_stride = 0;
  float* out = nullptr;         // [n_tokens, n_heads * head_dim], row stride out_stride
  int64_t out_stride = 0;
  const void* kv = nullptr;     // this layer's pool, layout above
  KvDtype kv_dtype = KvDtype::kF32;  // its page dtype (row format: kv_row_format(kv_dtype, head_dim))
  int32_t kv_planes = 2;        // 2: K and V planes; 1: V is the K row (layout above)
  int32_t page_size = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;       // divides n_heads
  int32_t head_dim = 0;
  float scale = 1.0f;           // usually 1 / sqrt(head_dim)
  float softcap = 0.0f;         // > 0: score = softcap * tanh(score / softcap) after scaling (Gemma 2)
  int32_t window = 0;           // > 0: a query at position p sees keys (p - window, p] only (sliding window)
  int32_t n_seqs = 0;
  const int32_t* token_indptr = nullptr;  // [n_seqs + 1] rows of q/out owned by each sequence, from 0
  const int32_t* start_pos = nullptr;     // [n_seqs] position of each sequence's first row
  const int32_t* page_indptr = nullptr;   // [n_seqs + 1] ranges into page_ids, from 0
  const int32_t* page_ids = nullptr;      // flattened block tables
};

void paged_attention(const PagedAttentionArgs& args, ThreadPool* pool, Isa isa);

}  // namespace tessera::kernels
