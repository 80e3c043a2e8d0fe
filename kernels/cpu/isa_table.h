// Private: the per-ISA function table behind matmul() and paged_attention().
// Each ISA translation unit fills one IsaKernels; the scalar one is the oracle.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/common/dtype.h"
#include "tessera/kernels/kv_format.h"

namespace tessera::kernels {
class PackedWeights;
}

namespace tessera::kernels::cpu {

// Float-weight GEMM job: y[t, r] = sum_c w[r, c] * x[t, c] for rows [r0, r1), tokens [t0, t1).
struct GemmJob {
  const uint8_t* w = nullptr;  // row r at w + r * w_row_bytes
  size_t w_row_bytes = 0;
  int64_t cols = 0;
  const float* x = nullptr;    // row t at x + t * x_stride
  int64_t x_stride = 0;
  float* y = nullptr;          // row t at y + t * y_stride
  int64_t y_stride = 0;
};

// Q8_0-weight GEMM job; activations pre-quantized by IsaKernels::quantize_q8 into
// xq [n, cols] bytes (row t at xq + t * cols) and xd [n, cols / 32 * q8_scale_repeat] scales
// (each block's scale repeated q8_scale_repeat times, so SIMD paths load them as vectors).
struct GemmQ8Job {
  DType w_type = DType::kQ8_0;  // Q8_0 (gemm_q8_0), or a format of qblock_tiles.h
  const uint8_t* w = nullptr;  // Q8_0 blocks: {fp16 d, int8 q[32]} = 34 bytes
  size_t w_row_bytes = 0;
  int64_t cols = 0;
  const int8_t* xq = nullptr;
  const float* xd = nullptr;
  float* y = nullptr;
  int64_t y_stride = 0;
  const PackedWeights* packed = nullptr;  // set: the weights' packed copy (qblock_packed.h), w unused
};

// Attention of n_rows query rows that share one kv head of one sequence (see attention.h for
// the pool layout). Row r (query q_rows[r], output out_rows[r], head_dim floats each) is at
// position pos[r] and attends to positions [0, pos[r]] through `pages`. Pool offsets are in
// bytes; each K/V head row is in format `fmt` (kv_format.h).
struct AttnGroup {
  const float* const* q_rows = nullptr;
  float* const* out_rows = nullptr;
  const int32_t* pos = nullptr;
  int32_t n_rows = 0;
  const uint8_t* kv = nullptr;    // the layer's pool
  KvRowFormat fmt;                // the rows' format (dtype, head_dim, int8 group)
  const int32_t* pages = nullptr; // the sequence's block table
  int32_t page_size = 0;
  int64_t page_stride = 0;        // bytes per page (K and V)
  int64_t token_stride = 0;       // bytes per slot (n_kv_heads rows)
  int64_t kv_offset = 0;          // bytes: kv_head * row bytes
  int64_t v_offset = 0;           // bytes from a K slot to its V slot
  int32_t head_dim = 0;
  float scale = 1.0f;
  float softcap = 0.0f;           // > 0: scores = softcap * tanh(scores / softcap)
  int32_t window = 0;             // > 0: row r sees keys (pos[r] - window, pos[r]] only
  float* scratch = nullptr;       // attn_scratch_floats(head_dim, n_rows) floats
};
// Layout: kt [head_dim][16], acc and qs [n_rows][head_dim], m and l [n_rows], then (f16/int8
// pools) the block's 16 decoded V rows and one decoded K row.
inline int64_t attn_scratch_floats(int32_t head_dim, int32_t n_rows) {
  return static_cast<int64_t>(head_dim) * 16 + 2 * static_cast<int64_t>(n_rows) * head_dim + 2 * n_rows +
         17 * static_cast<int64_t>(head_dim);
}

using GemmFn = void (*)(const GemmJob& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
using GemmQ8Fn = void (*)(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

struct IsaKernels {
  GemmFn gemm_f32;
  GemmFn gemm_f16;
  GemmFn gemm_bf16;
  GemmQ8Fn gemm_q8_0;
  // Quantizes one activation row (cols % 32 == 0) into q [cols] and d [cols / 32 * q8_scale_repeat].
  // q is signed int8, or int8 + 128 stored as uint8 on paths whose int8 dot is u8 x s8 (VNNI).
  // Every path rounds identically (x * (1 / d), ties to even), so they feed the same integers.
  void (*quantize_q8)(const float* x, int64_t cols, int8_t* q, float* d);
  int q8_scale_repeat;
  void (*attend_group)(const AttnGroup& group);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, float* y, int64_t n);  // y += a * x
  void (*scale)(float a, float* y, int64_t n);                 // y *= a
};

const IsaKernels& scalar_kernels();
const IsaKernels& avx2_kernels();
const IsaKernels& avx512_kernels();

// The scalar quantizer: q[c] = round_half_even(x[c] * (1 / d_b)), d_b = max|x in block b| / 127,
// one scale per block, signed q.
void quantize_activations_q8(const float* x, int64_t cols, int8_t* q, float* d);

}  // namespace tessera::kernels::cpu
