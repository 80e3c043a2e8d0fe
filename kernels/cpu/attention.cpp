#include "tessera/kernels/attention.h"

#include <algorithm>
#include <vector>

#include "isa_table.h"
#include "tessera/common/check.h"
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

// Query tokens per work item: with the GQA group's heads, 4 tokens x group rows share each
// gathered block of keys; without GQA (group 1: DeepSeek-V2's per-head K/V) 16 tokens.
constexpr int32_t kTokensPerItem = 4;
int32_t tokens_per_item(int32_t group) { return group == 1 ? 4 * kTokensPerItem : kTokensPerItem; }

struct Item {
  int32_t seq, kv_head0, kv_head1, row0, row1;  // rows [row0, row1) of q/out, all in sequence `seq`
};

}  // namespace

void paged_attention(const PagedAttentionArgs& a, ThreadPool* pool, Isa isa) {
  TS_CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0);
  TS_CHECK_GT(a.page_size, 0);
  TS_CHECK(a.kv_planes == 1 || a.kv_planes == 2) << "kv_planes " << a.kv_planes;
  if (a.n_seqs <= 0) return;
  const cpu::IsaKernels& k = kernels_for(isa);
  const int32_t group = a.n_heads / a.n_kv_heads;
  const int32_t per_item = tokens_per_item(group);
  // Work items: (sequence, block of query rows) x kv heads. With enough row blocks to keep
  // every thread busy (many decode sequences), one item takes all kv heads of its rows: the
  // heads of one token slot are adjacent in the pool, so one core streaming a sequence's K/V
  // head after head finds the later heads' lines already in its caches.
  int64_t row_blocks = 0;
  for (int32_t s = 0; s < a.n_seqs; ++s) {
    row_blocks += (a.token_indptr[s + 1] - a.token_indptr[s] + per_item - 1) / per_item;
  }
  const int32_t threads = pool != nullptr ? pool->size() : 1;
  const int32_t heads_per_item = row_blocks >= 4 * static_cast<int64_t>(threads) ? a.n_kv_heads : 1;
  thread_local std::vector<Item> items;
  items.clear();
  for (int32_t s = 0; s < a.n_seqs; ++s) {
    for (int32_t r = a.token_indptr[s]; r < a.token_indptr[s + 1]; r += per_item) {
      const int32_t r1 = std::min(a.token_indptr[s + 1], r + per_item);
      for (int32_t g = 0; g < a.n_kv_heads; g += heads_per_item) items.push_back({s, g, g + heads_per_item, r, r1});
    }
  }
  // Longest rows (largest positions) first: better balance for causal prefill.
  std::stable_sort(items.begin(), items.end(), [&](const Item& x, const Item& y) {
    return a.start_pos[x.seq] + (x.row1 - a.token_indptr[x.seq]) > a.start_pos[y.seq] + (y.row1 - a.token_indptr[y.seq]);
  });
  const KvRowFormat fmt = kv_row_format(a.kv_dtype, a.head_dim);
  const auto row_bytes = static_cast<int64_t>(fmt.row_bytes());
  const int64_t token_stride = static_cast<int64_t>(a.n_kv_heads) * row_bytes;
  const Item* item_list = items.data();  // `items` inside a task would name the worker's own
  auto attend = [&](const Item& it, int32_t kv_head) {
    const int32_t n_rows = (it.row1 - it.row0) * group;
    thread_local std::vector<float> scratch;
    thread_local std::vector<const float*> q_rows;
    thread_local std::vector<float*> out_rows;
    thread_local std::vector<int32_t> pos;
    scratch.resize(static_cast<size_t>(cpu::attn_scratch_floats(a.head_dim, n_rows)));
    q_rows.clear();
    out_rows.clear();
    pos.clear();
    for (int32_t r = it.row0; r < it.row1; ++r) {
      for (int32_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        q_rows.push_back(a.q + r * a.q_stride + static_cast<int64_t>(h) * a.head_dim);
        out_rows.push_back(a.out + r * a.out_stride + static_cast<int64_t>(h) * a.head_dim);
        pos.push_back(a.start_pos[it.seq] + (r - a.token_indptr[it.seq]));
      }
    }
    const cpu::AttnGroup g{.q_rows = q_rows.data(), .out_rows = out_rows.data(), .pos = pos.data(), .n_rows = n_rows,
                           .kv = static_cast<const uint8_t*>(a.kv), .fmt = fmt, .pages = a.page_ids + a.page_indptr[it.seq], .page_size = a.page_size,
                           .page_stride = a.kv_planes * static_cast<int64_t>(a.page_size) * token_stride,
                           .token_stride = token_stride,
                           .kv_offset = static_cast<int64_t>(kv_head) * row_bytes,
                           .v_offset = a.kv_planes == 2 ? static_cast<int64_t>(a.page_size) * token_stride : 0,
                           .head_dim = a.head_dim, .scale = a.scale, .softcap = a.softcap,
                           .window = a.window, .scratch = scratch.data()};
    k.attend_group(g);
  };
  auto task = [&](int64_t i) {
    const Item& it = item_list[i];
    for (int32_t kv_head = it.kv_head0; kv_head < it.kv_head1; ++kv_head) attend(it, kv_head);
  };
  if (pool == nullptr) {
    for (size_t i = 0; i < items.size(); ++i) task(static_cast<int64_t>(i));
  } else {
    pool->parallel_for(static_cast<int64_t>(items.size()), task);
  }
}

}  // namespace tessera::kernels
