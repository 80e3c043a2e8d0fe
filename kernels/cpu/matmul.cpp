#include "tessera/kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "isa_table.h"
#include "tessera/common/check.h"
#include "tessera/kernels/thread_pool.h"

namespace tessera::kernels {
namespace {

const cpu::IsaKernels& kernels_for(Isa isa) {
  TS_CHECK(isa_supported(isa)) << "ISA path " << isa_name(isa) << " not supported by this CPU";
  switch (isa) {
    case Isa::kAvx512: return cpu::avx512_kernels();
    case Isa::kAvx2: return cpu::avx2_kernels();
    case Isa::kScalar: break;
  }
  return cpu::scalar_kernels();
}

// Tokens per cache block: a multiple of every path's register tile (6, 4, 3).
constexpr int64_t kTokenBlock = 48;

struct Split {
  int64_t row_chunk = 0;
  int64_t n_row_chunks = 0;
  int64_t n_token_blocks = 0;
};

Split plan_split(int64_t rows, int64_t n, int threads) {
  Split s;
  s.n_token_blocks = (n + kTokenBlock - 1) / kTokenBlock;
  const int64_t want_tasks = static_cast<int64_t>(threads) * 4;
  const int64_t chunks = std::max<int64_t>(1, want_tasks / s.n_token_blocks);
  int64_t rc = (rows + chunks - 1) / chunks;
  rc = (rc + 15) / 16 * 16;
  s.row_chunk = std::clamp<int64_t>(rc, 16, 256);
  s.n_row_chunks = (rows + s.row_chunk - 1) / s.row_chunk;
  return s;
}

template <class Job, class Fn>
void run_tiled(const Job& job, Fn fn, int64_t rows, int64_t n, ThreadPool* pool) {
  const Split s = plan_split(rows, n, pool ? pool->size() : 1);
  auto task = [&](int64_t i) {
    const int64_t rc = i / s.n_token_blocks, tb = i % s.n_token_blocks;
    const int64_t r0 = rc * s.row_chunk, r1 = std::min(rows, r0 + s.row_chunk);
    const int64_t t0 = tb * kTokenBlock, t1 = std::min(n, t0 + kTokenBlock);
    fn(job, r0, r1, t0, t1);
  };
  const int64_t n_tasks = s.n_row_chunks * s.n_token_blocks;
  if (pool == nullptr) {
    for (int64_t i = 0; i < n_tasks; ++i) task(i);
  } else {
    pool->parallel_for(n_tasks, task);
  }
}

}  // namespace

bool matmul_supports(DType w_type) {
  return w_type == DType::kF32 || w_type == DType::kF16 || w_type == DType::kBF16 || w_type == DType::kQ8_0;
}

void matmul(const MatmulArgs& a, ThreadPool* pool, Isa isa) {
  TS_CHECK(matmul_supports(a.w_type)) << "matmul: unsupported weight dtype " << dtype_name(a.w_type);
  TS_CHECK(a.w != nullptr && a.x != nullptr && a.y != nullptr);
  TS_CHECK_GE(a.x_stride, a.cols);
  TS_CHECK_GE(a.y_stride, a.rows);
  if (a.n <= 0 || a.rows <= 0) return;
  const cpu::IsaKernels& k = kernels_for(isa);
  const size_t row_bytes = dtype_row_bytes(a.w_type, a.cols);
  const auto* w = static_cast<const uint8_t*>(a.w);

  if (a.w_type != DType::kQ8_0) {
    const cpu::GemmJob job{.w = w, .w_row_bytes = row_bytes, .cols = a.cols, .x = a.x, .x_stride = a.x_stride,
                           .y = a.y, .y_stride = a.y_stride};
    const cpu::GemmFn fn = a.w_type == DType::kF32 ? k.gemm_f32 : a.w_type == DType::kF16 ? k.gemm_f16 : k.gemm_bf16;
    run_tiled(job, fn, a.rows, a.n, pool);
    return;
  }

  // Q8_0: quantize the activations once (per row, blocks of 32), then int8 dot products.
  TS_CHECK_EQ(a.cols % 32, 0);
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xd;
  xq.resize(static_cast<size_t>(a.n * a.cols));
  const int64_t scales_per_row = a.cols / 32 * k.q8_scale_repeat;
  xd.resize(static_cast<size_t>(a.n * scales_per_row));
  // Plain pointers: inside the tasks, `xq`/`xd` would name the worker thread's own instances.
  int8_t* q_base = xq.data();
  float* d_base = xd.data();
  auto quantize = [&](int64_t t) {
    k.quantize_q8(a.x + t * a.x_stride, a.cols, q_base + t * a.cols, d_base + t * scales_per_row);
  };
  if (pool != nullptr && a.n >= 16) {
    pool->parallel_for(a.n, quantize);
  } else {
    for (int64_t t = 0; t < a.n; ++t) quantize(t);
  }
  const cpu::GemmQ8Job job{.w = w, .w_row_bytes = row_bytes, .cols = a.cols, .xq = q_base, .xd = d_base,
                           .y = a.y, .y_stride = a.y_stride};
  run_tiled(job, k.gemm_q8_0, a.rows, a.n, pool);
}

}  // namespace tessera::kernels
