#include "quant_gemm.h"

#include <utility>
#include <vector>

#include "isa_table.h"
#include "tessera/common/check.h"
#include "tessera/kernels/thread_pool.h"

namespace tessera::kernels::cpu {

bool quant_gemm_supports(DType t) { return dtype_is_quantized(t) && t != DType::kQ8_0; }

void quant_gemm_plan(QuantGemmJob* job, Isa isa) {
  job->dot_q = nullptr;
  job->dot_q4 = nullptr;
  job->tiles = nullptr;
#define TESSERA_QD_PICK(type, name, act_kind)                                             \
  case DType::type:                                                                       \
    job->dot_q = isa == Isa::kAvx512 ? dot_##name##_avx512                                \
                 : isa == Isa::kAvx2 ? dot_##name##_avx2                                  \
                                     : dot_##name;                                        \
    job->dot_q4 = isa == Isa::kAvx512 ? dot4_##name##_avx512                              \
                  : isa == Isa::kAvx2 ? dot4_##name##_avx2                                \
                                      : nullptr;                                          \
    job->act = act_kind;                                                                  \
    break;
  switch (job->w_type) {
    TESSERA_QD_PICK(kQ4_K, q4_k_q8_k, ActKind::kQ8_K)
    TESSERA_QD_PICK(kQ5_K, q5_k_q8_k, ActKind::kQ8_K)
    TESSERA_QD_PICK(kQ6_K, q6_k_q8_k, ActKind::kQ8_K)
    TESSERA_QD_PICK(kQ2_K, q2_k_q8_k, ActKind::kQ8_K)
    TESSERA_QD_PICK(kQ3_K, q3_k_q8_k, ActKind::kQ8_K)
    TESSERA_QD_PICK(kIQ4_XS, iq4_xs_q8_k, ActKind::kQ8_K)
    TESSERA_QD_PICK(kQ4_0, q4_0_q8_0, ActKind::kQ8_0)
    TESSERA_QD_PICK(kQ4_1, q4_1_q8_0, ActKind::kQ8_0)
    TESSERA_QD_PICK(kQ5_0, q5_0_q8_0, ActKind::kQ8_0)
    TESSERA_QD_PICK(kQ5_1, q5_1_q8_0, ActKind::kQ8_0)
    TESSERA_QD_PICK(kIQ4_NL, iq4_nl_q8_0, ActKind::kQ8_0)
    default: break;
  }
#undef TESSERA_QD_PICK
  job->tiles = isa == Isa::kAvx512 ? kquant_tiles_avx512(job->w_type)
               : isa == Isa::kAvx2 ? (qblock_tiles_avx2(job->w_type) != nullptr ? qblock_tiles_avx2(job->w_type)
                                                                                    : kquant_tiles_avx2(job->w_type))
                                   : nullptr;
  job->quantize_k = isa == Isa::kAvx512 ? quantize_row_q8_K_avx512 : nullptr;
  TS_CHECK(job->dot_q != nullptr) << "quant_gemm: no integer dot for " << dtype_name(job->w_type);
}

void quant_gemm_prepare(QuantGemmJob* const* jobs, size_t n_jobs, ThreadPool* pool) {
  struct Input {
    const float* x;
    int64_t x_stride, cols, n;
    ActKind act;
    void (*quantize_k)(const float*, BlockQ8_K*, int64_t);
    size_t off;  // in blocks (Q8_K) or bytes (Q8_0 values; scales at off / 32)
  };
  thread_local std::vector<Input> inputs;
  thread_local std::vector<BlockQ8_K> xk;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xd;
  inputs.clear();
  std::vector<int> input_of(n_jobs, -1);
  size_t k_total = 0, q_total = 0;
  for (size_t j = 0; j < n_jobs; ++j) {
    const QuantGemmJob& job = *jobs[j];
    if (job.n <= 0) continue;
    for (size_t i = 0; i < inputs.size() && input_of[j] < 0; ++i) {
      const Input& in = inputs[i];
      if (in.x == job.x && in.x_stride == job.x_stride && in.cols == job.cols && in.n == job.n && in.act == job.act) {
        input_of[j] = static_cast<int>(i);
      }
    }
    if (input_of[j] >= 0) continue;
    input_of[j] = static_cast<int>(inputs.size());
    if (job.act == ActKind::kQ8_K) {
      inputs.push_back({job.x, job.x_stride, job.cols, job.n, job.act, job.quantize_k, k_total});
      k_total += static_cast<size_t>(job.n * (job.cols / kQK_K));
    } else {
      inputs.push_back({job.x, job.x_stride, job.cols, job.n, job.act, nullptr, q_total});
      q_total += static_cast<size_t>(job.n * job.cols);
    }
  }
  if (inputs.empty()) return;
  xk.resize(k_total);
  xq.resize(q_total);
  xd.resize(q_total / 32);
  // Plain pointers: inside pool tasks the thread_local names would be the worker's own.
  BlockQ8_K* k_base = xk.data();
  int8_t* q_base = xq.data();
  float* d_base = xd.data();
  const Input* ins = inputs.data();
  std::vector<std::pair<int, int64_t>> rows;  // (input, row)
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (int64_t t = 0; t < inputs[i].n; ++t) rows.emplace_back(static_cast<int>(i), t);
  }
  auto quantize = [&](int64_t r) {
    const Input& in = ins[rows[static_cast<size_t>(r)].first];
    const int64_t t = rows[static_cast<size_t>(r)].second;
    const float* x = in.x + t * in.x_stride;
    if (in.act == ActKind::kQ8_K) {
      BlockQ8_K* out = k_base + in.off + static_cast<size_t>(t * (in.cols / kQK_K));
      if (in.quantize_k != nullptr) {
        in.quantize_k(x, out, in.cols);
      } else {
        quantize_row_q8_K(x, out, in.cols);
      }
    } else {
      const size_t q = in.off + static_cast<size_t>(t * in.cols);
      quantize_activations_q8(x, in.cols, q_base + q, d_base + q / 32);
    }
  };
  if (pool != nullptr && rows.size() >= 16) {
    pool->parallel_for(static_cast<int64_t>(rows.size()), quantize);
  } else {
    for (size_t r = 0; r < rows.size(); ++r) quantize(static_cast<int64_t>(r));
  }
  for (size_t j = 0; j < n_jobs; ++j) {
    if (input_of[j] < 0) continue;
    const Input& in = inputs[static_cast<size_t>(input_of[j])];
    if (in.act == ActKind::kQ8_K) {
      jobs[j]->xk = k_base + in.off;
    } else {
      jobs[j]->xq = q_base + in.off;
      jobs[j]->xd = d_base + in.off / 32;
    }
  }
}

void quant_gemm(const QuantGemmJob& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  if (job.tiles != nullptr) {
    job.tiles(job, r0, r1, t0, t1);
  } else {
    quant_gemm_rowwise(job, r0, r1, t0, t1);
  }
}

void quant_gemm_rowwise(const QuantGemmJob& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t nb = job.cols / dtype_block_size(job.w_type);
  const int64_t kb = job.cols / kQK_K, qb = job.cols / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* w = job.w + r * job.w_row_bytes;
    int64_t t = t0;
    if (job.dot_q4 != nullptr) {
      for (; t + 4 <= t1; t += 4) {
        const BlockQ8_K* xk[4] = {nullptr, nullptr, nullptr, nullptr};
        const int8_t* xq[4] = {nullptr, nullptr, nullptr, nullptr};
        const float* xd[4] = {nullptr, nullptr, nullptr, nullptr};
        float out[4];
        for (int j = 0; j < 4; ++j) {
          if (job.act == ActKind::kQ8_K) {
            xk[j] = job.xk + (t + j) * kb;
          } else {
            xq[j] = job.xq + (t + j) * job.cols;
            xd[j] = job.xd + (t + j) * qb;
          }
        }
        job.dot_q4(w, xk, xq, xd, nb, out);
        for (int j = 0; j < 4; ++j) job.y[(t + j) * job.y_stride + r] = out[j];
      }
    }
    for (; t < t1; ++t) {
      const BlockQ8_K* xk = job.act == ActKind::kQ8_K ? job.xk + t * kb : nullptr;
      const int8_t* xq = job.act == ActKind::kQ8_0 ? job.xq + t * job.cols : nullptr;
      const float* xd = job.act == ActKind::kQ8_0 ? job.xd + t * qb : nullptr;
      job.y[t * job.y_stride + r] = job.dot_q(w, xk, xq, xd, nb);
    }
  }
}

}  // namespace tessera::kernels::cpu

namespace tessera::kernels {

void round_as_matmul_input(DType w_type, float* x, int64_t cols) {
  switch (w_type) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kIQ4_NL: {
      TS_CHECK(cols % 32 == 0) << "round_as_matmul_input: " << cols << " columns";
      thread_local std::vector<int8_t> q;
      thread_local std::vector<float> d;
      q.resize(static_cast<size_t>(cols));
      d.resize(static_cast<size_t>(cols / 32));
      cpu::quantize_activations_q8(x, cols, q.data(), d.data());
      for (int64_t i = 0; i < cols; ++i) x[i] = static_cast<float>(q[static_cast<size_t>(i)]) * d[static_cast<size_t>(i / 32)];
      return;
    }
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS: {
      TS_CHECK(cols % 256 == 0) << "round_as_matmul_input: " << cols << " columns";
      thread_local std::vector<BlockQ8_K> b;
      b.resize(static_cast<size_t>(cols / 256));
      quantize_row_q8_K(x, b.data(), cols);
      for (int64_t i = 0; i < cols; ++i) x[i] = static_cast<float>(b[static_cast<size_t>(i / 256)].qs[i % 256]) * b[static_cast<size_t>(i / 256)].d;
      return;
    }
    default: return;
  }
}

}  // namespace tessera::kernels
