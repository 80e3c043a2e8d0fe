#include "tessera/kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "isa_table.h"
#include "kquant_packed.h"
#include "qblock_gemv.h"
#include "qblock_packed.h"
#include "qblock_packed_q8.h"
#include "qblock_tiles.h"
#include "quant_gemm.h"
#include "tessera/common/check.h"
#include "tessera/kernels/packed_weights.h"
#include "tessera/kernels/thread_pool.h"

namespace tessera::kernels {
namespace {

const cpu::IsaKernels& kernels_for(Isa isa) {
  TS_CHECK(isa_supported(isa)) << "ISA path " << isa_name(isa) << " not supported by this CPU (or above TESSERA_ISA)";
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

// A decode GEMV (n < kQBlockBatchMinN) reads each weight once whatever the chunk, so its chunks
// are not capped for the caches: one task on one thread (a task's set-up is per task), four
// per thread otherwise (balance); batches take at most 256 rows per task.
Split plan_split(int64_t rows, int64_t n, int threads) {
  Split s;
  s.n_token_blocks = (n + kTokenBlock - 1) / kTokenBlock;
  const bool gemv = n < cpu::kQBlockBatchMinN;
  const int64_t want_tasks = gemv && threads == 1 ? 1 : static_cast<int64_t>(threads) * 4;
  const int64_t chunks = std::max<int64_t>(1, want_tasks / s.n_token_blocks);
  int64_t rc = (rows + chunks - 1) / chunks;
  rc = (rc + 15) / 16 * 16;
  s.row_chunk = std::clamp<int64_t>(rc, 16, gemv ? std::max<int64_t>(rc, 16) : 256);
  s.n_row_chunks = (rows + s.row_chunk - 1) / s.row_chunk;
  return s;
}

// Share starts (ThreadPool::run's bounds) for tasks of the given costs: participant p's share
// starts at the task nearest to p / threads of the total cost (matmul_batch's entries have
// tasks of different sizes: Q, K and V of a GQA model).
void cost_bounds(const std::vector<double>& cost, int threads, int64_t* bounds) {
  double total = 0;
  for (double c : cost) total += c;
  const auto n = static_cast<int64_t>(cost.size());
  bounds[0] = 0;
  double before = 0;  // cost of tasks [0, i)
  int64_t i = 0;
  for (int p = 1; p < threads; ++p) {
    const double at = total * p / threads;
    while (i < n && before + cost[static_cast<size_t>(i)] / 2 < at) before += cost[static_cast<size_t>(i++)];
    bounds[p] = i;
  }
  bounds[threads] = n;
}

// fn(r0, r1, cost) for each task of one matmul_batch entry, in task order (row chunk by row
// chunk, token block by token block); cost = row bytes x rows x tokens, what the task reads
// (decode) or computes (batches), in the units cost_bounds compares. matmul_batch and
// matmul_prefetch_ranges both walk the tasks with it, so their orders and shares agree.
template <class F>
void for_each_task(const Split& sp, int64_t rows, int64_t n, size_t row_bytes, F&& fn) {
  for (int64_t rc = 0; rc < sp.n_row_chunks; ++rc) {
    const int64_t r0 = rc * sp.row_chunk, r1 = std::min(rows, r0 + sp.row_chunk);
    for (int64_t tb = 0; tb < sp.n_token_blocks; ++tb) {
      const int64_t tokens = std::min<int64_t>(n - tb * kTokenBlock, kTokenBlock);
      fn(r0, r1, static_cast<double>(row_bytes) * static_cast<double>(r1 - r0) * static_cast<double>(tokens));
    }
  }
}

}  // namespace

size_t matmul_prefetch_ranges(std::span<const MatmulArgs> next, int threads, int participant, size_t budget,
                              std::span<ThreadPool::PrefetchRange> out) {
  if (threads < 2 || participant < 0 || participant >= threads) return 0;
  struct Task {
    const uint8_t* p;
    size_t bytes;
  };
  thread_local std::vector<Task> tasks;  // matmul_batch's task order: entry by entry, row chunk by row chunk
  thread_local std::vector<double> cost;
  tasks.clear();
  cost.clear();
  for (const MatmulArgs& a : next) {
    if (a.n <= 0 || a.rows <= 0) continue;
    if (a.n >= kPrefetchMaxTokens) return 0;
    const bool packed = a.w_packed != nullptr && !a.w_packed->empty();
    const size_t row_bytes = dtype_row_bytes(a.w_type, a.cols);
    for_each_task(plan_split(a.rows, a.n, threads), a.rows, a.n, row_bytes, [&](int64_t r0, int64_t r1, double c) {
      cost.push_back(c);
      if (packed) {  // row chunks are multiples of 16 rows: whole groups
        const int64_t g0 = r0 / 16, g1 = (r1 + 15) / 16;
        tasks.push_back({a.w_packed->group(g0), static_cast<size_t>((g1 - g0) * a.w_packed->group_bytes())});
      } else {
        tasks.push_back({static_cast<const uint8_t*>(a.w) + static_cast<size_t>(r0) * row_bytes,
                         static_cast<size_t>(r1 - r0) * row_bytes});
      }
    });
  }
  std::vector<int64_t> bounds(static_cast<size_t>(threads) + 1);
  cost_bounds(cost, threads, bounds.data());
  size_t nr = 0, left = budget;
  // The participant's share, as matmul_batch deals it.
  for (int64_t i = bounds[static_cast<size_t>(participant)]; i < bounds[static_cast<size_t>(participant) + 1] && left > 0; ++i) {
    const Task& t = tasks[static_cast<size_t>(i)];
    const size_t take = std::min(left, t.bytes);
    if (nr > 0 && static_cast<const uint8_t*>(out[nr - 1].p) + out[nr - 1].bytes == t.p) {
      out[nr - 1].bytes += take;
    } else if (nr < out.size()) {
      out[nr++] = {t.p, take};
    } else {
      break;
    }
    left -= take;
  }
  return nr;
}

bool matmul_supports(DType w_type) {
  return w_type == DType::kF32 || w_type == DType::kF16 || w_type == DType::kBF16 || w_type == DType::kQ8_0 ||
         cpu::quant_gemm_supports(w_type);
}

void matmul(const MatmulArgs& a, ThreadPool* pool, Isa isa) { matmul_batch({&a, 1}, pool, isa); }

void matmul_batch(std::span<const MatmulArgs> list, ThreadPool* pool, Isa isa) {
  const cpu::IsaKernels& k = kernels_for(isa);
  struct Prepared {
    cpu::GemmJob fjob;
    cpu::GemmFn ffn = nullptr;
    cpu::GemmQ8Job qjob;
    cpu::GemmQ8Fn qfn = nullptr;
    cpu::QuantGemmJob gjob;  // the other block formats (quant_gemm.h)
    bool quant_gemm = false;
    Split split;
    size_t row_bytes = 0;
    int64_t rows = 0, n = 0, first_task = 0;
    int quant = -1;  // index into the quantized inputs, for Q8_0
  };
  struct Quant {
    const float* x;
    int64_t x_stride, cols, n;
    size_t q_off, d_off;
  };
  thread_local std::vector<Prepared> prep;
  thread_local std::vector<Quant> quants;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xd;
  prep.clear();
  quants.clear();
  size_t q_total = 0, d_total = 0;
  int64_t tasks = 0;
  const int threads = pool ? pool->size() : 1;
  for (const MatmulArgs& a : list) {
    TS_CHECK(matmul_supports(a.w_type)) << "matmul: unsupported weight dtype " << dtype_name(a.w_type);
    TS_CHECK(a.w != nullptr && a.x != nullptr && a.y != nullptr);
    TS_CHECK_GE(a.x_stride, a.cols);
    TS_CHECK_GE(a.y_stride, a.rows);
    if (a.n <= 0 || a.rows <= 0) continue;
    Prepared p;
    p.rows = a.rows;
    p.n = a.n;
    const size_t row_bytes = dtype_row_bytes(a.w_type, a.cols);
    p.row_bytes = row_bytes;
    const auto* w = static_cast<const uint8_t*>(a.w);
    // Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL on AVX-512 take the Q8_0 path's activations and the kernels of
    // qblock_tiles.h (as do Q8_0 batches); otherwise quant_gemm.h's dots.
    const bool qblock_tiles = isa == Isa::kAvx512 && (a.w_type == DType::kQ8_0 || cpu::qblock_tiles_support(a.w_type));
    const PackedWeights* pw = a.w_packed;
    const bool packed = pw != nullptr && !pw->empty() && pw->isa() == isa && pw->dtype() == a.w_type;
    // On AVX2 a packed copy serves every batch size (avx2/qblock_packed_avx2.cpp; prefill ~3 % slower
    // per CPU-s than quant_gemm's 8-row tiles over the original layout, SmolLM2 Q4_0 pp128, but the
    // repack may then drop the file's pages: one copy of the weights in memory).
    const bool packed_avx2 = packed && isa == Isa::kAvx2;
    if (cpu::quant_gemm_supports(a.w_type) && !qblock_tiles && !packed_avx2) {
      p.gjob = {.w_type = a.w_type, .w = w, .w_row_bytes = row_bytes, .cols = a.cols, .x = a.x, .x_stride = a.x_stride,
                .n = a.n, .y = a.y, .y_stride = a.y_stride};
      cpu::quant_gemm_plan(&p.gjob, isa);
      p.quant_gemm = true;
      // Packed Q4_K / Q5_K / Q6_K (kquant_packed.h) serve decode and, where the AMX tiles do not
      // apply, batches too (bit-identical to the tiles over the file layout).
      if (packed && isa == Isa::kAvx512 && cpu::packed_kquant_kernel(a.w_type) != nullptr &&
          !(a.n >= cpu::kQBlockAmxMinN && amx_tiles_enabled())) {
        TS_CHECK(pw->rows() == a.rows && pw->cols() == a.cols) << "matmul: packed weights of another shape";
        p.gjob.packed = pw;
        p.gjob.tiles = cpu::packed_kquant_kernel(a.w_type);
      }
    } else if (a.w_type != DType::kQ8_0 && !qblock_tiles && !packed_avx2) {
      p.fjob = {.w = w, .w_row_bytes = row_bytes, .cols = a.cols, .x = a.x, .x_stride = a.x_stride, .y = a.y,
                .y_stride = a.y_stride};
      p.ffn = a.w_type == DType::kF32 ? k.gemm_f32 : a.w_type == DType::kF16 ? k.gemm_f16 : k.gemm_bf16;
    } else {
      TS_CHECK_EQ(a.cols % 32, 0);
      for (size_t i = 0; i < quants.size(); ++i) {
        const Quant& q = quants[i];
        if (q.x == a.x && q.x_stride == a.x_stride && q.cols == a.cols && q.n == a.n) p.quant = static_cast<int>(i);
      }
      if (p.quant < 0) {
        p.quant = static_cast<int>(quants.size());
        quants.push_back({a.x, a.x_stride, a.cols, a.n, q_total, d_total});
        q_total += static_cast<size_t>(a.n * a.cols);
        d_total += static_cast<size_t>(a.n * (a.cols / 32) * k.q8_scale_repeat);
      }
      p.qjob = {.w_type = a.w_type, .w = w, .w_row_bytes = row_bytes, .cols = a.cols, .xq = nullptr, .xd = nullptr, .y = a.y,
                .y_stride = a.y_stride};
      const bool gemv = a.n < cpu::kQBlockBatchMinN;  // Q8_0: the ISA's own GEMV (tile_q8 one row at a time)
      p.qfn = !qblock_tiles                         ? k.gemm_q8_0
              : gemv && a.w_type == DType::kQ8_0  ? k.gemm_q8_0
              : gemv                              ? cpu::gemv_qblock_avx512
                                                  : cpu::gemm_qblock_avx512;
      // Packed weights (load-time repack) serve decode and, where the AMX tiles do not apply
      // (no AMX, or fewer than kQBlockAmxMinN tokens), batches too; AMX batches read the original
      // layout (its pages fault back in from the file if the repack dropped them), except Q8_0's.
      const bool amx_batch = a.n >= cpu::kQBlockAmxMinN && amx_tiles_enabled();
      if (packed_avx2) {
        TS_CHECK(pw->rows() == a.rows && pw->cols() == a.cols) << "matmul: packed weights of another shape";
        p.qjob.packed = pw;
        p.qfn = cpu::gemm_qblock_packed_avx2;
      } else if (qblock_tiles && packed) {
        TS_CHECK(pw->rows() == a.rows && pw->cols() == a.cols) << "matmul: packed weights of another shape";
        if (a.w_type == DType::kQ8_0) {  // AMX batches too: its own AMX tiles read the packed copy
          p.qjob.packed = pw;
          p.qfn = cpu::gemm_q8_0_packed_avx512;
        } else if (!amx_batch) {
          p.qjob.packed = pw;
          p.qfn = cpu::gemm_qblock_packed_avx512;
        }
      }
    }
    p.split = plan_split(a.rows, a.n, threads);
    p.first_task = tasks;
    tasks += p.split.n_row_chunks * p.split.n_token_blocks;
    prep.push_back(p);
  }
  if (tasks == 0) return;
  {
    thread_local std::vector<cpu::QuantGemmJob*> gjobs;
    gjobs.clear();
    for (Prepared& p : prep) {
      if (p.quant_gemm) gjobs.push_back(&p.gjob);
    }
    if (!gjobs.empty()) cpu::quant_gemm_prepare(gjobs.data(), gjobs.size(), pool);
  }

  // Quantize each distinct Q8_0 input once (per row, blocks of 32).
  if (!quants.empty()) {
    xq.resize(q_total);
    xd.resize(d_total);
    // Plain pointers: inside pool tasks, `xq`/`xd` would name the worker thread's own instances.
    int8_t* q_base = xq.data();
    float* d_base = xd.data();
    const Quant* qs = quants.data();
    std::vector<std::pair<int, int64_t>> rows;  // (input, row)
    for (size_t i = 0; i < quants.size(); ++i) {
      for (int64_t t = 0; t < quants[i].n; ++t) rows.emplace_back(static_cast<int>(i), t);
    }
    auto quantize = [&](int64_t r) {
      const Quant& q = qs[rows[static_cast<size_t>(r)].first];
      const int64_t t = rows[static_cast<size_t>(r)].second;
      const int64_t per_row = q.cols / 32 * k.q8_scale_repeat;
      k.quantize_q8(q.x + t * q.x_stride, q.cols, q_base + q.q_off + t * q.cols, d_base + q.d_off + t * per_row);
    };
    if (pool != nullptr && rows.size() >= 16) {
      pool->parallel_for(static_cast<int64_t>(rows.size()), quantize);
    } else {
      for (size_t r = 0; r < rows.size(); ++r) quantize(static_cast<int64_t>(r));
    }
    for (Prepared& p : prep) {
      if (p.quant < 0) continue;
      p.qjob.xq = q_base + quants[static_cast<size_t>(p.quant)].q_off;
      p.qjob.xd = d_base + quants[static_cast<size_t>(p.quant)].d_off;
    }
  }

  const Prepared* ps = prep.data();
  const size_t np = prep.size();
  auto task = [ps, np](int64_t i) {
    // The entry whose tasks include i (binary search: a MoE step lists ~100 expert matmuls).
    const Prepared* it = std::upper_bound(ps, ps + np, i, [](int64_t v, const Prepared& q) { return v < q.first_task; });
    const Prepared& p = *(it - 1);
    const int64_t local = i - p.first_task;
    const int64_t rc = local / p.split.n_token_blocks, tb = local % p.split.n_token_blocks;
    const int64_t r0 = rc * p.split.row_chunk, r1 = std::min(p.rows, r0 + p.split.row_chunk);
    const int64_t t0 = tb * kTokenBlock, t1 = std::min(p.n, t0 + kTokenBlock);
    if (p.quant_gemm) {
      cpu::quant_gemm(p.gjob, r0, r1, t0, t1);
    } else if (p.ffn != nullptr) {
      p.ffn(p.fjob, r0, r1, t0, t1);
    } else {
      p.qfn(p.qjob, r0, r1, t0, t1);
    }
  };
  if (pool == nullptr) {
    for (int64_t i = 0; i < tasks; ++i) task(i);
    return;
  }
  thread_local std::vector<double> cost;
  thread_local std::vector<int64_t> bounds;
  cost.clear();
  for (const Prepared& p : prep) {
    for_each_task(p.split, p.rows, p.n, p.row_bytes, [](int64_t, int64_t, double c) { cost.push_back(c); });
  }
  bounds.resize(static_cast<size_t>(threads) + 1);
  cost_bounds(cost, threads, bounds.data());
  pool->parallel_for(tasks, task, bounds.data());
}

}  // namespace tessera::kernels
