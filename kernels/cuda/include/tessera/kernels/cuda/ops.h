// Element-wise and row-wise CUDA kernels of a Llama-family forward pass (see types.h for the
// conventions: device pointers, a stream, cudaError_t, no synchronization).
//
// Data types along the forward pass: the residual stream x and GEMM outputs are f32; GEMM
// inputs (normalized activations, SwiGLU output, attention output) and weights are 16-bit
// (HalfType); K/V pages are 16-bit.
#pragma once

#include "tessera/common/dtype.h"
#include "tessera/kernels/cuda/types.h"

namespace tessera::kernels::cuda {

// out[t, :] = table[tokens[t], :] as f32.
// table: [vocab, dim] of `table_type`; tokens: [n] ids in [0, vocab) (not checked here);
// out: [n, dim] f32, row stride dim.
cudaError_t embedding_gather(HalfType table_type, const void* table, int64_t dim, const int32_t* tokens, int64_t n,
                             float* out, cudaStream_t stream);

// Fused residual add and RMSNorm, row by row:
//   if delta: x[t, :] += delta[t, :]      (x updated in place)
//   out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight[:]   (stored as out_type)
// x: [n, dim] f32 stride dim; delta: [n, dim] f32 stride dim or nullptr; weight: [dim] f32;
// out: [n, dim] of out_type, stride dim.
cudaError_t rmsnorm_residual(float* x, const float* delta, const float* weight, HalfType out_type, void* out, int64_t n,
                             int64_t dim, float eps, cudaStream_t stream);

// RoPE on Q and K fused with the K/V page write, for the fused QKV projection's output.
struct RopeWriteKvArgs {
  float* qkv = nullptr;         // [n_tokens, n_heads*hd + 2*n_kv_heads*hd] f32, row stride qkv_stride:
  int64_t qkv_stride = 0;       //   Q | K | V of each token. Bias is added and Q rotated in place.
  const float* bias = nullptr;  // [n_heads*hd + 2*n_kv_heads*hd] f32 or nullptr (qwen2 Q/K/V bias)
  int32_t n_tokens = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;         // even
  const int32_t* positions = nullptr;  // [n_tokens] position of each token
  const int64_t* slots = nullptr;      // [n_tokens] page_id * page_size + offset
  HalfType kv_type = HalfType::kF16;
  void* kv = nullptr;           // this layer's pool [num_pages, 2, page_size, n_kv_heads, head_dim]
  int32_t page_size = 0;
  float theta = 10000.0f;
  bool interleaved = true;      // pairs (2i, 2i+1); false: pairs (i, i + hd/2)
};
// Angles are computed as the CPU's rope_table does (in double: pos * theta^(-2i/hd)).
cudaError_t rope_write_kv(const RopeWriteKvArgs& args, cudaStream_t stream);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, hidden + i], stored as out_type.
// gate_up: [n, 2 * hidden] f32 (gate columns, then up columns), stride 2 * hidden;
// out: [n, hidden] of out_type, stride hidden.
cudaError_t swiglu(const float* gate_up, int64_t n, int64_t hidden, HalfType out_type, void* out, cudaStream_t stream);

// Weight upload: dst[r, c] = src[r, c] converted to dst_type. src (device) is [rows, cols] of
// src_type in its file layout (dtype_row_bytes(src_type, cols) bytes per row): F32, F16, BF16
// or Q8_0 (dequantized: q * d). dst: [rows, cols] of dst_type, row-major.
cudaError_t convert_weights(DType src_type, const void* src, int64_t rows, int64_t cols, HalfType dst_type, void* dst,
                            cudaStream_t stream);

// dst[i, :] = src[rows[i], :] for i in [0, n): src [*, cols] and dst [n, cols] of type t
// (row-major, contiguous); rows: [n] indices into src (not checked here).
cudaError_t gather_rows(HalfType t, const void* src, int64_t cols, const int32_t* rows, int64_t n, void* dst,
                        cudaStream_t stream);

// dst[i] = (float) src[i] for n elements of a 16-bit type (test and readback helper).
cudaError_t half_to_f32(HalfType src_type, const void* src, int64_t n, float* dst, cudaStream_t stream);
// dst[i] = src[i] rounded to nearest even in dst_type.
cudaError_t f32_to_half(const float* src, int64_t n, HalfType dst_type, void* dst, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
