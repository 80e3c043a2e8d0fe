// Flash-attention style prefill over paged K/V with a causal mask; see attention.h.
#include "device_util.cuh"
#include "tessera/kernels/cuda/attention.h"

namespace tessera::kernels::cuda {
namespace {

using detail::to_f32;
using detail::warp_max;
using detail::warp_sum;

constexpr int kWarps = 8;
constexpr int kRows = 32;                    // query rows (token, head) per block
constexpr int kRowsPerWarp = kRows / kWarps;
constexpr int kKeyTile = 32;                 // positions per K/V tile (one per lane when scoring)
constexpr int kKvStride = kMaxHeadDim + 2;   // padded smem row: lane-strided reads hit distinct banks
constexpr int kLaneDims = kMaxHeadDim / 32;

// Block (tile, kvh): rows r = t * group + g for the tile's tokens t and the group's heads g.
template <class T>
__global__ void __launch_bounds__(kWarps * 32) prefill_kernel(PrefillAttentionArgs a, int group, int tile_tokens) {
  const int tile = blockIdx.x, kvh = blockIdx.y;
  const int s = a.tile_seq[tile], row0 = a.tile_row[tile];
  const int seq_row0 = a.token_indptr[s];
  const int row_end = min(a.token_indptr[s + 1], row0 + tile_tokens);
  const int pos0 = a.start_pos[s] + (row0 - seq_row0);
  const int last_pos = pos0 + (row_end - row0) - 1;
  const int hd = a.kv.head_dim, n_kv = a.kv.n_kv_heads, ps = a.kv.page_size;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  __shared__ float q_s[kRows][kMaxHeadDim];
  __shared__ T k_s[kKeyTile][kKvStride];
  __shared__ T v_s[kKeyTile][kKvStride];
  for (int i = threadIdx.x; i < kRows * hd; i += blockDim.x) {
    const int r = i / hd, d = i % hd, t = r / group, g = r % group;
    const bool valid = t < tile_tokens && row0 + t < row_end;
    q_s[r][d] = valid ? a.q[static_cast<int64_t>(row0 + t) * a.q_stride + static_cast<int64_t>(kvh * group + g) * hd + d] * a.scale
                      : 0.0f;
  }

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kLaneDims];
  int row_pos[kRowsPerWarp];
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int r = warp * kRowsPerWarp + j, t = r / group;
    row_pos[j] = (t < tile_tokens && row0 + t < row_end) ? pos0 + t : -1;  // -1: no such row
    m[j] = -INFINITY;
    l[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < kLaneDims; ++i) acc[j][i] = 0.0f;
  }

  const T* kv = static_cast<const T*>(a.kv.kv);
  const int64_t tok_stride = static_cast<int64_t>(n_kv) * hd;
  const int64_t page_stride = 2 * static_cast<int64_t>(ps) * tok_stride, v_off = static_cast<int64_t>(ps) * tok_stride;
  const int32_t* pages = a.kv.page_ids + a.kv.page_indptr[s];
  const int n_key_tiles = (last_pos + kKeyTile) / kKeyTile;
  for (int kt = 0; kt < n_key_tiles; ++kt) {
    const int k0 = kt * kKeyTile;
    __syncthreads();  // previous tile fully consumed (and q_s written, on the first pass)
    for (int i = threadIdx.x; i < kKeyTile * hd; i += blockDim.x) {
      const int j = i / hd, d = i % hd, p = k0 + j;
      if (p <= last_pos) {
        const T* kr = kv + pages[p / ps] * page_stride + static_cast<int64_t>(p % ps) * tok_stride + static_cast<int64_t>(kvh) * hd;
        k_s[j][d] = kr[d];
        v_s[j][d] = kr[v_off + d];
      } else {
        k_s[j][d] = detail::from_f32<T>(0.0f);
        v_s[j][d] = detail::from_f32<T>(0.0f);
      }
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      const int P = row_pos[j];
      if (P < k0) continue;  // no row, or every key of this tile is in the row's future (warp-uniform)
      const int r = warp * kRowsPerWarp + j;
      const int p = k0 + lane;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += q_s[r][d] * to_f32(k_s[lane][d]);
      const bool visible = p <= P;
      const float score = visible ? dot : -INFINITY;
      const float mn = fmaxf(m[j], warp_max(score));
      const float corr = __expf(m[j] - mn);
      const float e = visible ? __expf(score - mn) : 0.0f;
      l[j] = l[j] * corr + warp_sum(e);
#pragma unroll
      for (int i = 0; i < kLaneDims; ++i) acc[j][i] *= corr;
#pragma unroll 8
      for (int k = 0; k < kKeyTile; ++k) {
        const float pk = __shfl_sync(0xffffffffu, e, k);
#pragma unroll
        for (int i = 0; i < kLaneDims; ++i) {
          const int d = lane + 32 * i;
          if (d < hd) acc[j][i] += pk * to_f32(v_s[k][d]);
        }
      }
      m[j] = mn;
    }
  }

#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    if (row_pos[j] < 0) continue;
    const int r = warp * kRowsPerWarp + j, t = r / group, g = r % group;
    T* out = static_cast<T*>(a.out) + static_cast<int64_t>(row0 + t) * a.out_stride + static_cast<int64_t>(kvh * group + g) * hd;
    const float inv = 1.0f / l[j];
#pragma unroll
    for (int i = 0; i < kLaneDims; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) out[d] = detail::from_f32<T>(acc[j][i] * inv);
    }
  }
}

}  // namespace

int32_t build_prefill_tiles(const int32_t* token_indptr, int32_t n_seqs, int32_t tile_tokens,
                            std::vector<int32_t>& tile_seq, std::vector<int32_t>& tile_row) {
  int32_t n = 0;
  for (int32_t s = 0; s < n_seqs; ++s) {
    for (int32_t r = token_indptr[s]; r < token_indptr[s + 1]; r += tile_tokens) {
      tile_seq.push_back(s);
      tile_row.push_back(r);
      ++n;
    }
  }
  return n;
}

cudaError_t prefill_attention(const PrefillAttentionArgs& a, cudaStream_t stream) {
  const PagedKvView& kv = a.kv;
  if (a.n_tiles <= 0) return cudaSuccess;
  if (kv.n_kv_heads <= 0 || a.n_heads % kv.n_kv_heads != 0 || kv.head_dim <= 0 || kv.head_dim % 2 != 0 ||
      kv.head_dim > kMaxHeadDim || kv.page_size <= 0 || a.n_tiles > 0x7fffffff || kv.n_kv_heads > 65535) {
    return cudaErrorInvalidValue;
  }
  const int group = a.n_heads / kv.n_kv_heads;
  if (group > kRows) return cudaErrorInvalidValue;
  const int tile_tokens = prefill_tile_tokens(group);
  return detail::dispatch_half(kv.kv_type, [&](auto tag) {
    using T = decltype(tag);
    prefill_kernel<T><<<dim3(a.n_tiles, kv.n_kv_heads), kWarps * 32, 0, stream>>>(a, group, tile_tokens);
    return cudaGetLastError();
  });
}

}  // namespace tessera::kernels::cuda
