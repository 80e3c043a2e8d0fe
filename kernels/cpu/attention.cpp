#include "tessera/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

constexpr int kKeyChunk = 32;  // keys scored per online-softmax update

// One query row (token `row`, head h) of sequence s over positions [0, pos].
void attend_one(const PagedAttentionArgs& a, const cpu::IsaKernels& k, int32_t s, int32_t row, int32_t h) {
  const int32_t hd = a.head_dim;
  const int32_t group = a.n_heads / a.n_kv_heads;
  const int32_t kvh = h / group;
  const int32_t pos = a.start_pos[s] + (row - a.token_indptr[s]);
  const int32_t* pages = a.page_ids + a.page_indptr[s];
  const int64_t token_stride = static_cast<int64_t>(a.n_kv_heads) * hd;       // floats per token slot
  const int64_t page_stride = 2 * static_cast<int64_t>(a.page_size) * token_stride;
  const int64_t v_offset = static_cast<int64_t>(a.page_size) * token_stride;
  const float* q = a.q + row * a.q_stride + static_cast<int64_t>(h) * hd;
  float* out = a.out + row * a.out_stride + static_cast<int64_t>(h) * hd;
  std::fill(out, out + hd, 0.0f);

  float scores[kKeyChunk];
  const float* vrows[kKeyChunk];
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  for (int32_t p0 = 0; p0 <= pos; p0 += kKeyChunk) {
    const int32_t cnt = std::min(kKeyChunk, pos + 1 - p0);
    float cmax = -std::numeric_limits<float>::infinity();
    for (int32_t c = 0; c < cnt; ++c) {
      const int32_t p = p0 + c;
      const float* base = a.kv + pages[p / a.page_size] * page_stride + (p % a.page_size) * token_stride + kvh * hd;
      scores[c] = k.dot(q, base, hd) * a.scale;
      vrows[c] = base + v_offset;
      cmax = std::max(cmax, scores[c]);
    }
    if (cmax > m) {
      const float r = std::exp(m - cmax);  // exp(-inf) = 0 on the first chunk
      if (l != 0.0f) k.scale(r, out, hd);
      l *= r;
      m = cmax;
    }
    for (int32_t c = 0; c < cnt; ++c) {
      const float e = std::exp(scores[c] - m);
      l += e;
      k.axpy(e, vrows[c], out, hd);
    }
  }
  k.scale(1.0f / l, out, hd);
}

}  // namespace

void paged_attention(const PagedAttentionArgs& a, ThreadPool* pool, Isa isa) {
  TS_CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0);
  TS_CHECK_GT(a.page_size, 0);
  if (a.n_seqs <= 0) return;
  const cpu::IsaKernels& k = kernels_for(isa);
  const int32_t n_rows = a.token_indptr[a.n_seqs];
  // Work items: (row, head) pairs, grouped in tasks of a few items.
  std::vector<int32_t> row_seq(static_cast<size_t>(n_rows));
  for (int32_t s = 0; s < a.n_seqs; ++s) {
    for (int32_t r = a.token_indptr[s]; r < a.token_indptr[s + 1]; ++r) row_seq[static_cast<size_t>(r)] = s;
  }
  const int64_t items = static_cast<int64_t>(n_rows) * a.n_heads;
  const int64_t per_task = std::max<int64_t>(1, items / (static_cast<int64_t>(pool ? pool->size() : 1) * 16));
  const int64_t n_tasks = (items + per_task - 1) / per_task;
  auto task = [&](int64_t t) {
    const int64_t end = std::min(items, (t + 1) * per_task);
    for (int64_t i = t * per_task; i < end; ++i) {
      const int32_t row = static_cast<int32_t>(i / a.n_heads);
      attend_one(a, k, row_seq[static_cast<size_t>(row)], row, static_cast<int32_t>(i % a.n_heads));
    }
  };
  if (pool == nullptr) {
    for (int64_t t = 0; t < n_tasks; ++t) task(t);
  } else {
    pool->parallel_for(n_tasks, task);
  }
}

}  // namespace tessera::kernels
