// CUDA paged attention (decode split-K and prefill tiles) against the CPU kernel, by NMSE.
// Shapes: head_dim 64 and 128; GQA 1, 2, 4, 8; page sizes 1 and 16; f16 and bf16 K/V;
// sequence lengths 1 to 4097; batches 1, 5 and 257; split counts 1, 7 and the heuristic's.
// The CPU reads the same K/V values (the 16-bit pages converted exactly to f32), so the only
// differences are f32 summation order, __expf, and rounding the output to 16 bits.
#include <algorithm>
#include <numeric>
#include <tuple>

#include "cuda_test_util.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/cuda/attention.h"

namespace tessera::kernels::cuda {
namespace {

using namespace testing;

struct Batch {
  std::vector<int32_t> start_pos, n_tokens;  // per sequence
};

struct Problem {
  int32_t hd, group, ps, n_kv = 2;
  HalfType t;
  int32_t n_heads() const { return group * n_kv; }
};

// Builds the pool, block tables and queries; runs CPU and GPU; returns the NMSE.
double run(const Problem& pr, const Batch& b, bool decode, int32_t n_splits, uint64_t seed) {
  const int32_t S = static_cast<int32_t>(b.start_pos.size());
  const int64_t q_dim = static_cast<int64_t>(pr.n_heads()) * pr.hd, tok = static_cast<int64_t>(pr.n_kv) * pr.hd;
  std::vector<int32_t> token_indptr{0}, page_indptr{0}, page_ids;
  int32_t total_pages = 0;
  for (int32_t s = 0; s < S; ++s) {
    token_indptr.push_back(token_indptr.back() + b.n_tokens[static_cast<size_t>(s)]);
    total_pages += (b.start_pos[static_cast<size_t>(s)] + b.n_tokens[static_cast<size_t>(s)] + pr.ps - 1) / pr.ps;
  }
  const int32_t num_pages = total_pages + 3;
  std::vector<int32_t> perm(static_cast<size_t>(num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
  size_t next = 0;
  for (int32_t s = 0; s < S; ++s) {
    const int32_t np = (b.start_pos[static_cast<size_t>(s)] + b.n_tokens[static_cast<size_t>(s)] + pr.ps - 1) / pr.ps;
    for (int32_t p = 0; p < np; ++p) page_ids.push_back(perm[next++]);
    page_indptr.push_back(static_cast<int32_t>(page_ids.size()));
  }
  const size_t pool_elems = static_cast<size_t>(num_pages) * 2 * static_cast<size_t>(pr.ps) * static_cast<size_t>(tok);
  const auto kv_f = random_floats(pool_elems, seed + 1);
  std::vector<uint16_t> kv_h(pool_elems);
  std::vector<float> kv_cpu(pool_elems);
  for (size_t i = 0; i < pool_elems; ++i) {
    kv_h[i] = to_half_bits(pr.t, kv_f[i]);
    kv_cpu[i] = from_half_bits(pr.t, kv_h[i]);
  }
  const int32_t n_rows = token_indptr.back();
  const auto q = random_floats(static_cast<size_t>(n_rows) * static_cast<size_t>(q_dim), seed + 2, -2.0f, 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(pr.hd));

  std::vector<float> ref(q.size());
  kernels::paged_attention({.q = q.data(), .q_stride = q_dim, .out = ref.data(), .out_stride = q_dim, .kv = kv_cpu.data(),
                            .page_size = pr.ps, .n_heads = pr.n_heads(), .n_kv_heads = pr.n_kv, .head_dim = pr.hd,
                            .scale = scale, .n_seqs = S, .token_indptr = token_indptr.data(),
                            .start_pos = b.start_pos.data(), .page_indptr = page_indptr.data(), .page_ids = page_ids.data()},
                           nullptr, Isa::kScalar);

  DeviceArray<uint16_t> d_kv(kv_h);
  DeviceArray<float> d_q(q);
  DeviceArray<uint16_t> d_out(q.size());
  DeviceArray<int32_t> d_page_indptr(page_indptr), d_page_ids(page_ids), d_token_indptr(token_indptr),
      d_start(b.start_pos);
  const PagedKvView view{.kv_type = pr.t, .kv = d_kv.get(), .page_size = pr.ps, .n_kv_heads = pr.n_kv, .head_dim = pr.hd,
                         .page_indptr = d_page_indptr.get(), .page_ids = d_page_ids.get()};
  cudaError_t err;
  if (decode) {
    std::vector<int32_t> positions(b.start_pos);  // one token per sequence
    DeviceArray<int32_t> d_pos(positions);
    DeviceArray<float> ws(decode_workspace_floats(S, pr.n_heads(), pr.hd, n_splits));
    err = decode_attention({.q = d_q.get(), .q_stride = q_dim, .out = d_out.get(), .out_stride = q_dim, .kv = view,
                            .n_heads = pr.n_heads(), .scale = scale, .n_seqs = S, .positions = d_pos.get(),
                            .n_splits = n_splits, .workspace = ws.get()},
                           nullptr);
    EXPECT_EQ(err, cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  } else {
    std::vector<int32_t> tile_seq, tile_row;
    const int32_t n_tiles = build_prefill_tiles(token_indptr.data(), S, prefill_tile_tokens(pr.group), tile_seq, tile_row);
    DeviceArray<int32_t> d_ts(tile_seq), d_tr(tile_row);
    err = prefill_attention({.q = d_q.get(), .q_stride = q_dim, .out = d_out.get(), .out_stride = q_dim, .kv = view,
                             .n_heads = pr.n_heads(), .scale = scale, .n_seqs = S, .token_indptr = d_token_indptr.get(),
                             .start_pos = d_start.get(), .n_tiles = n_tiles, .tile_seq = d_ts.get(), .tile_row = d_tr.get()},
                            nullptr);
    EXPECT_EQ(err, cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  return nmse(half_to_float(pr.t, d_out.to_host()), ref);
}

double tolerance(HalfType t) { return t == HalfType::kF16 ? 2e-6 : 3e-5; }

using Param = std::tuple<int32_t, int32_t, int32_t, HalfType>;  // head_dim, group, page_size, type

class CudaAttention : public ::testing::TestWithParam<Param> {
 protected:
  Problem problem() const {
    const auto [hd, group, ps, t] = GetParam();
    return Problem{.hd = hd, .group = group, .ps = ps, .t = t};
  }
};

TEST_P(CudaAttention, DecodeMatchesCpu) {
  TS_REQUIRE_GPU();
  const Problem pr = problem();
  Batch one{{0}, {1}};                               // a single position
  Batch mixed{{0, 1, 16, 32, 4096}, {1, 1, 1, 1, 1}};  // lengths 1, 2, 17, 33, 4097
  Batch wide;                                          // 257 sequences of lengths 1..300
  std::mt19937_64 rng(5);
  for (int i = 0; i < 257; ++i) {
    wide.start_pos.push_back(static_cast<int32_t>(rng() % 300));
    wide.n_tokens.push_back(1);
  }
  for (int32_t splits : {1, 7}) {
    EXPECT_LT(run(pr, one, true, splits, 11), tolerance(pr.t)) << "len 1, splits " << splits;
    EXPECT_LT(run(pr, mixed, true, splits, 12), tolerance(pr.t)) << "mixed lengths, splits " << splits;
  }
  const int32_t auto_splits = choose_decode_splits(257, pr.n_kv, 300, 132);
  EXPECT_LT(run(pr, wide, true, auto_splits, 13), tolerance(pr.t)) << "257 sequences, splits " << auto_splits;
  EXPECT_LT(run(pr, wide, true, 64, 14), tolerance(pr.t)) << "257 sequences, 64 splits (many empty)";
}

TEST_P(CudaAttention, PrefillMatchesCpu) {
  TS_REQUIRE_GPU();
  const Problem pr = problem();
  Batch single{{0}, {1}};
  Batch prompt{{0}, {77}};
  // Fresh prompts, chunks continuing a prefix, a decode row mixed in, and a chunk ending at 4097.
  Batch chunked{{0, 5, 100, 31, 4000}, {37, 16, 1, 33, 97}};
  EXPECT_LT(run(pr, single, false, 1, 21), tolerance(pr.t));
  EXPECT_LT(run(pr, prompt, false, 1, 22), tolerance(pr.t));
  EXPECT_LT(run(pr, chunked, false, 1, 23), tolerance(pr.t));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Combine(::testing::Values(64, 128), ::testing::Values(1, 2, 4, 8),
                                            ::testing::Values(1, 16), ::testing::Values(HalfType::kF16, HalfType::kBF16)));

// Argument checks happen before any launch, so they run without a GPU too.
TEST(CudaAttentionArgs, RejectsShapesOutsideTheLimits) {
  DecodeAttentionArgs d{};
  d.kv.n_kv_heads = 1;
  d.kv.page_size = 16;
  d.n_heads = 1;
  d.n_seqs = 1;
  d.kv.head_dim = 2 * kMaxHeadDim;
  EXPECT_EQ(decode_attention(d, nullptr), cudaErrorInvalidValue);
  d.kv.head_dim = 64;
  d.n_heads = 2 * kMaxGroup;  // group too large for the decode kernel
  EXPECT_EQ(decode_attention(d, nullptr), cudaErrorInvalidValue);
  d.n_heads = 3;
  d.kv.n_kv_heads = 2;  // not a multiple
  EXPECT_EQ(decode_attention(d, nullptr), cudaErrorInvalidValue);
  d.n_heads = 2;
  d.n_splits = 4;  // splits without a workspace
  EXPECT_EQ(decode_attention(d, nullptr), cudaErrorInvalidValue);
  PrefillAttentionArgs p{};
  p.n_tiles = 1;
  p.kv.n_kv_heads = 1;
  p.kv.page_size = 1;
  p.kv.head_dim = 63;  // odd
  p.n_heads = 1;
  EXPECT_EQ(prefill_attention(p, nullptr), cudaErrorInvalidValue);
}

TEST(CudaAttentionArgs, TilesCoverEveryRowOnce) {
  const std::vector<int32_t> indptr{0, 1, 40, 40 + 33};
  std::vector<int32_t> seq, row;
  EXPECT_EQ(build_prefill_tiles(indptr.data(), 3, 16, seq, row), 1 + 3 + 3);
  EXPECT_EQ(seq, (std::vector<int32_t>{0, 1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(row, (std::vector<int32_t>{0, 1, 17, 33, 40, 56, 72}));
  EXPECT_EQ(prefill_tile_tokens(1), 32);
  EXPECT_EQ(prefill_tile_tokens(3), 10);
  EXPECT_EQ(prefill_tile_tokens(32), 1);
}

TEST(CudaAttentionArgs, SplitHeuristicStaysInRange) {
  EXPECT_EQ(choose_decode_splits(1, 8, 10, 132), 1);        // short: one split
  EXPECT_EQ(choose_decode_splits(256, 8, 4096, 132), 1);    // the batch fills the GPU
  const int32_t s = choose_decode_splits(1, 8, 4096, 132);  // batch 1, long: split
  EXPECT_GT(s, 1);
  EXPECT_LE(s, 64);
}

}  // namespace
}  // namespace tessera::kernels::cuda
