// y = W x for a batch of activation rows: Y[t, r] = sum_c W[r, c] * X[t, c].
//
// One kernel for decode (n = 1, a GEMV) and prefill / multi-sequence decode (n > 1, a GEMM,
// register-blocked over rows x tokens and cache-blocked over row chunks x token blocks).
// Weights: F32, F16, BF16 (converted to f32 in registers, f32 FMA) and Q8_0 (the activations
// are first quantized per row to Q8_0-style blocks {f32 scale, int8[32]}, then int8 dot
// products: AVX-512 VNNI vpdpbusd, AVX2 maddubs). The other ggml block formats (Q4_0, Q4_1,
// Q5_0, Q5_1, Q2_K .. Q6_K, IQ4_NL, IQ4_XS; cols a multiple of their block) are computed from
// the blocks as stored (cpu/quant_gemm.h): Q2_K .. Q6_K and IQ4_XS with activations quantized
// to ggml Q8_K, and Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL with Q8_0-style activations, by integer
// dots (scalar, AVX2, AVX-512 VNNI; every path bit-identical to the scalar one).
//
// Contract (checked with TS_CHECK; the caller validates shapes and dtypes first):
// - W is row-major [rows, cols], blocked along cols for Q8_0 (cols % 32 == 0);
// - X rows are `x_stride` floats apart, Y rows `y_stride` floats apart; Y must not alias X;
// - the pool, when given, is used for the parallel region (nullptr = the calling thread);
// - w_packed, when given (packed_weights.h: pack_for_matmul of these very weights, on the ISA
//   matmul runs), is what the kernel reads instead of w (same results, bit for bit) — except
//   for batches the AMX tiles take (amx_tiles_enabled(), >= 12 tokens), which read w; it is
//   ignored on another ISA. The caller keeps it alive for the call, and w stays readable.
#pragma once

#include <cstdint>
#include <span>

#include "tessera/common/dtype.h"
#include "tessera/kernels/isa.h"
#include "tessera/kernels/thread_pool.h"

namespace tessera::kernels {

class PackedWeights;

struct MatmulArgs {
  DType w_type = DType::kF32;
  const void* w = nullptr;  // [rows, cols] weights, dtype_row_bytes(w_type, cols) bytes per row
  int64_t rows = 0;         // output features
  int64_t cols = 0;         // input features
  const float* x = nullptr; // [n, cols] activations, row t at x + t * x_stride
  int64_t x_stride = 0;
  int64_t n = 0;            // number of activation rows (tokens)
  float* y = nullptr;       // [n, rows] outputs, row t at y + t * y_stride (overwritten)
  int64_t y_stride = 0;
  const PackedWeights* w_packed = nullptr;  // optional packed copy of w (borrowed)
};

bool matmul_supports(DType w_type);

// x[0, cols) <- the activation values that matmul() with w_type weights computes with: rounded
// through Q8_0-style blocks (fp16 scale) for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (cols % 32 == 0),
// through ggml Q8_K for Q2_K .. Q6_K and IQ4_XS (cols % 256 == 0), unchanged for F32, F16, BF16.
// (The latent cache of multi-head latent attention stores its rows this way, so that attention
// with attn_kv_b absorbed sees the latent that attn_kv_b's own matmul would.)
void round_as_matmul_input(DType w_type, float* x, int64_t cols);
void matmul(const MatmulArgs& args, ThreadPool* pool, Isa isa);
// Several independent matmuls in one parallel region (e.g. the Q, K and V projections of the
// same activations): one barrier instead of one per matmul. Q8_0 entries that read the same
// activations (same x, x_stride, cols, n) share one quantization. Outputs must not overlap.
void matmul_batch(std::span<const MatmulArgs> list, ThreadPool* pool, Isa isa);

// Idle prefetch (thread_pool.h): the ranges a participant of `threads` prefetches while it waits
// before matmul_batch(next, pool of `threads`, ...): the start of the rows of the tasks that
// matmul_batch gives it (the same task split and cost-balanced shares), in task order, adjacent
// ones merged, at most `budget` bytes and out.size() ranges; the packed copy where next's entry
// has a non-empty one (the caller passes the copy matmul_batch will read, or none). Returns how
// many it wrote: none for one thread, or for batches of kPrefetchMaxTokens+ tokens
// (compute-bound: their weights are read from cache many times). A hint: results never change.
inline constexpr int64_t kPrefetchMaxTokens = 8;
size_t matmul_prefetch_ranges(std::span<const MatmulArgs> next, int threads, int participant, size_t budget,
                              std::span<ThreadPool::PrefetchRange> out);

}  // namespace tessera::kernels
