// Paged GQA attention on the GPU: a split-K decode kernel and a flash-attention prefill kernel.
//
// K/V layout of one layer, identical to the CPU pool but in a 16-bit type (HalfType):
//   kv[num_pages, 2, page_size, n_kv_heads, head_dim]   (index 0 = K, 1 = V)
// Position p of sequence s lives in page page_ids[page_indptr[s] + p / page_size], offset
// p % page_size. The K/V of the step's own tokens are written first (rope_write_kv), so a query
// at position P attends to positions [0, P] (causal). Query head h reads KV head
// h / (n_heads / n_kv_heads). Softmax is online, accumulation in f32.
//
// Limits (else cudaErrorInvalidValue): head_dim even and <= kMaxHeadDim; n_heads a multiple of
// n_kv_heads; decode: n_heads / n_kv_heads <= kMaxGroup.
#pragma once

#include <cstddef>
#include <vector>

#include "tessera/kernels/cuda/types.h"

namespace tessera::kernels::cuda {

struct PagedKvView {
  HalfType kv_type = HalfType::kF16;
  const void* kv = nullptr;      // this layer's pool, layout above (device)
  int32_t page_size = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  const int32_t* page_indptr = nullptr;  // [n_seqs + 1] ranges into page_ids, from 0 (device)
  const int32_t* page_ids = nullptr;     // flattened block tables (device)
};

// Decode: exactly one query token per sequence (row s of q/out is sequence s).
// Flash-decoding: grid (n_kv_heads, n_seqs, n_splits); a block serves all query heads of one
// KV head and one contiguous share of the sequence's positions, writes a partial (max, sum,
// f32 accumulator) to `workspace`, and a second kernel merges the splits. n_splits == 1 skips
// the workspace and writes `out` directly.
struct DecodeAttentionArgs {
  const float* q = nullptr;   // [n_seqs, n_heads * head_dim] f32, row stride q_stride (RoPE applied)
  int64_t q_stride = 0;
  void* out = nullptr;        // [n_seqs, n_heads * head_dim] in kv.kv_type, row stride out_stride
  int64_t out_stride = 0;
  PagedKvView kv;
  int32_t n_heads = 0;
  float scale = 1.0f;         // usually 1 / sqrt(head_dim)
  int32_t n_seqs = 0;
  const int32_t* positions = nullptr;  // [n_seqs] position of each query; keys [0, position] (device)
  int32_t n_splits = 1;       // >= 1; a split with no positions contributes nothing
  float* workspace = nullptr;  // decode_workspace_floats(...) floats (device), when n_splits > 1
};

size_t decode_workspace_floats(int32_t n_seqs, int32_t n_heads, int32_t head_dim, int32_t n_splits);
// A split count that fills the GPU for this batch: about 2 blocks per SM, at least 64
// positions per split, at most 64 splits.
int32_t choose_decode_splits(int32_t n_seqs, int32_t n_kv_heads, int32_t max_seq_len, int32_t num_sms);

cudaError_t decode_attention(const DecodeAttentionArgs& args, cudaStream_t stream);

// Prefill / chunked prefill / mixed batches: any number of query rows per sequence.
// Work is cut in tiles of prefill_tile_tokens(group) consecutive query tokens of one sequence
// (32 query rows = tokens x query heads of one KV head); a block handles one tile for one KV
// head, streaming K/V tiles of 32 positions through shared memory up to the tile's last
// position, with the causal mask. Limit: group = n_heads / n_kv_heads <= 32.
inline int32_t prefill_tile_tokens(int32_t group) { return group >= 32 ? 1 : 32 / group; }

struct PrefillAttentionArgs {
  const float* q = nullptr;   // [n_tokens, n_heads * head_dim] f32, row stride q_stride (RoPE applied)
  int64_t q_stride = 0;
  void* out = nullptr;        // [n_tokens, n_heads * head_dim] in kv.kv_type, row stride out_stride
  int64_t out_stride = 0;
  PagedKvView kv;
  int32_t n_heads = 0;
  float scale = 1.0f;
  int32_t n_seqs = 0;
  const int32_t* token_indptr = nullptr;  // [n_seqs + 1] rows of q/out owned by each sequence (device)
  const int32_t* start_pos = nullptr;     // [n_seqs] position of each sequence's first row (device)
  int32_t n_tiles = 0;                    // entries of tile_seq / tile_row
  const int32_t* tile_seq = nullptr;      // [n_tiles] sequence of each tile (device)
  const int32_t* tile_row = nullptr;      // [n_tiles] first row (index into q) of each tile (device)
};

// Host helper: the tile map for a host copy of token_indptr ([n_seqs + 1]), tiles of
// `tile_tokens` = prefill_tile_tokens(group) tokens. Appends to tile_seq / tile_row; returns
// the number of tiles appended.
int32_t build_prefill_tiles(const int32_t* token_indptr, int32_t n_seqs, int32_t tile_tokens,
                            std::vector<int32_t>& tile_seq, std::vector<int32_t>& tile_row);

cudaError_t prefill_attention(const PrefillAttentionArgs& args, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
