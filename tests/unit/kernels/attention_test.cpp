// Paged attention vs a plain causal attention over contiguous K/V, written out in the test.
// Page sizes 1, 5, 16; GQA ratios 1, 2, 4; a ragged batch of 3 sequences with shuffled pages;
// every page dtype (f32, f16, int8: the reference attends over the values kv_decode_row gives,
// so each ISA path must read the stored format exactly as the scalar definition does); one-plane
// pages (the MLA latent cache: each K row its own V).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernel_test_util.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/thread_pool.h"

namespace tessera::kernels {
namespace {

struct Seq {
  int32_t start, n;  // positions [0, start) already cached, n new rows
};

const std::vector<Seq> kRagged = {{0, 17}, {40, 1}, {3, 100}};

void check(int32_t page_size, int32_t n_heads, int32_t n_kv, int32_t hd, Isa isa, ThreadPool* pool,
           const std::vector<Seq>& seqs = kRagged, KvDtype dtype = KvDtype::kF32, int32_t planes = 2) {
  const int64_t tok = static_cast<int64_t>(n_kv) * hd;
  const KvRowFormat fmt = kv_row_format(dtype, hd);
  const auto row_bytes = static_cast<int64_t>(fmt.row_bytes());
  // Contiguous K/V per sequence: [len, n_kv, hd] each.
  std::vector<std::vector<float>> ks, vs;
  std::vector<int32_t> token_indptr{0}, start_pos, page_indptr{0}, page_ids;
  int32_t total_pages = 0;
  for (const Seq& s : seqs) total_pages += (s.start + s.n + page_size - 1) / page_size;
  std::vector<int32_t> perm(static_cast<size_t>(total_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  std::vector<uint8_t> pool_kv(static_cast<size_t>(total_pages * planes * page_size * n_kv * row_bytes), 0xff);
  int32_t next_page = 0;
  uint64_t seed = 100;
  for (const Seq& s : seqs) {
    const int32_t len = s.start + s.n;
    ks.push_back(testing::random_floats(static_cast<size_t>(len * tok), seed++));
    vs.push_back(planes == 2 ? testing::random_floats(static_cast<size_t>(len * tok), seed++) : ks.back());  // one plane: V is K
    // The reference sees what the pool holds: each head row encoded and decoded.
    std::vector<uint8_t> row(static_cast<size_t>(row_bytes));
    for (auto* kv : {&ks.back(), &vs.back()}) {
      for (int64_t i = 0; i < len * n_kv; ++i) {
        kv_encode_row(fmt, kv->data() + i * hd, row.data());
        kv_decode_row(fmt, row.data(), kv->data() + i * hd);
      }
    }
    const int32_t np = (len + page_size - 1) / page_size;
    for (int32_t p = 0; p < np; ++p) page_ids.push_back(perm[static_cast<size_t>(next_page++)]);
    for (int32_t p = 0; p < len; ++p) {
      const int32_t page = page_ids[static_cast<size_t>(page_indptr.back() + p / page_size)];
      uint8_t* kdst = pool_kv.data() + ((static_cast<int64_t>(page) * planes + 0) * page_size + p % page_size) * n_kv * row_bytes;
      uint8_t* vdst = pool_kv.data() + ((static_cast<int64_t>(page) * planes + 1) * page_size + p % page_size) * n_kv * row_bytes;
      for (int32_t h = 0; h < n_kv; ++h) {
        kv_encode_row(fmt, ks.back().data() + p * tok + h * hd, kdst + h * row_bytes);
        if (planes == 2) kv_encode_row(fmt, vs.back().data() + p * tok + h * hd, vdst + h * row_bytes);
      }
    }
    page_indptr.push_back(static_cast<int32_t>(page_ids.size()));
    token_indptr.push_back(token_indptr.back() + s.n);
    start_pos.push_back(s.start);
  }
  const int32_t rows = token_indptr.back();
  const int64_t qs = static_cast<int64_t>(n_heads) * hd;
  const auto q = testing::random_floats(static_cast<size_t>(rows * qs), 1);
  std::vector<float> out(static_cast<size_t>(rows * qs));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  paged_attention({.q = q.data(), .q_stride = qs, .out = out.data(), .out_stride = qs, .kv = pool_kv.data(),
                   .kv_dtype = dtype, .kv_planes = planes, .page_size = page_size, .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = hd, .scale = scale,
                   .n_seqs = static_cast<int32_t>(seqs.size()), .token_indptr = token_indptr.data(),
                   .start_pos = start_pos.data(), .page_indptr = page_indptr.data(), .page_ids = page_ids.data()},
                  pool, isa);
  double max_err = 0.0;
  for (size_t si = 0; si < seqs.size(); ++si) {
    for (int32_t r = 0; r < seqs[si].n; ++r) {
      const int32_t pos = seqs[si].start + r, row = token_indptr[si] + r;
      for (int32_t h = 0; h < n_heads; ++h) {
        const int32_t kvh = h / (n_heads / n_kv);
        std::vector<double> sc(static_cast<size_t>(pos + 1));
        double mx = -1e300;
        for (int32_t p = 0; p <= pos; ++p) {
          double d = 0;
          for (int32_t i = 0; i < hd; ++i) d += static_cast<double>(q[static_cast<size_t>(row * qs + h * hd + i)]) * ks[si][static_cast<size_t>(p * tok + kvh * hd + i)];
          sc[static_cast<size_t>(p)] = d * scale;
          mx = std::max(mx, sc[static_cast<size_t>(p)]);
        }
        double z = 0;
        for (auto& v : sc) z += (v = std::exp(v - mx));
        for (int32_t i = 0; i < hd; ++i) {
          double o = 0;
          for (int32_t p = 0; p <= pos; ++p) o += sc[static_cast<size_t>(p)] / z * vs[si][static_cast<size_t>(p * tok + kvh * hd + i)];
          max_err = std::max(max_err, std::fabs(o - out[static_cast<size_t>(row * qs + h * hd + i)]));
        }
      }
    }
  }
  // Outputs are convex combinations of values in [-1, 1]; f32 accumulation over <= 104 keys.
  EXPECT_LT(max_err, 2e-6) << "page_size=" << page_size << " heads=" << n_heads << "/" << n_kv << " head_dim=" << hd
                           << " seqs=" << seqs.size() << " isa=" << isa_name(isa)
                           << " dtype=" << kv_dtype_name(dtype) << " planes=" << planes;
}

TEST(PagedAttention, MatchesContiguousReference) {
  ThreadPool pool(3);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    for (int32_t ps : {1, 5, 16}) {
      check(ps, 4, 4, 8, isa, &pool);    // GQA ratio 1
      check(ps, 4, 2, 19, isa, &pool);   // ratio 2, odd head_dim
      check(ps, 8, 2, 64, isa, nullptr); // ratio 4
    }
  }
}

// Many decode sequences (one query row each, positions 0..130, some across page boundaries):
// enough row blocks that one work item takes all kv heads of a sequence; head_dim 16, 32, 64 and
// 128 take the AVX-512 register-resident path, head_dim 8 its own. Sequence counts 1, 3, 17, 33.
TEST(PagedAttention, ManyDecodeSequencesMatchReference) {
  ThreadPool pool(2);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    for (int32_t n : {1, 3, 17, 33}) {
      std::vector<Seq> seqs;
      for (int32_t i = 0; i < n; ++i) seqs.push_back({(i * 37) % 131, 1});
      if (n == 17) seqs.push_back({5, 9});  // a prefill chunk among the decodes
      for (int32_t ps : {1, 16}) {
        check(ps, 9, 3, 64, isa, &pool, seqs);
        check(ps, 8, 2, 128, isa, &pool, seqs);
        check(ps, 8, 4, 8, isa, &pool, seqs);  // stories260K's heads: AVX-512's head_dim 8 path
        check(ps, 4, 2, 16, isa, &pool, seqs);
        check(ps, 6, 2, 32, isa, &pool, seqs);
      }
      check(16, 6, 3, 48, isa, &pool, seqs);  // head_dim 48: the portable path on every ISA
    }
  }
}

TEST(PagedAttention, HalfAndInt8PagesMatchReferenceOnEveryPath) {
  ThreadPool pool(2);
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kInt8}) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      for (int32_t ps : {1, 5, 16}) {
        check(ps, 4, 4, 8, isa, &pool, kRagged, dt);     // int8 group 8
        check(ps, 4, 2, 20, isa, &pool, kRagged, dt);    // odd-ish head_dim: int8 one group of 20, f16 tails
        check(ps, 8, 2, 64, isa, nullptr, kRagged, dt);  // AVX-512 register path (int8 group 32)
      }
      std::vector<Seq> decodes;
      for (int32_t i = 0; i < 17; ++i) decodes.push_back({(i * 37) % 131, 1});
      check(16, 8, 2, 128, isa, &pool, decodes, dt);
      check(16, 6, 3, 48, isa, &pool, decodes, dt);  // int8 group 16: the portable path everywhere
      check(5, 8, 4, 8, isa, &pool, decodes, dt);    // head_dim 8 (int8: one group of 8)
      check(5, 4, 2, 16, isa, &pool, decodes, dt);   // AVX-512: f16 register path, int8 (group 16) portable
      check(5, 6, 2, 32, isa, &pool, decodes, dt);   // AVX-512 register path, int8 group 32
    }
  }
}

TEST(KvFormat, RowBytesAndRoundTripBounds) {
  EXPECT_EQ(kv_row_format(KvDtype::kF32, 64).row_bytes(), 256u);
  EXPECT_EQ(kv_row_format(KvDtype::kF16, 64).row_bytes(), 128u);
  EXPECT_EQ(kv_row_format(KvDtype::kInt8, 64).row_bytes(), 68u);  // 2 fp16 scales + 64 codes
  EXPECT_EQ(kv_row_format(KvDtype::kInt8, 8).group, 8);
  EXPECT_EQ(kv_row_format(KvDtype::kInt8, 20).group, 20);
  EXPECT_EQ(parse_kv_dtype("int8"), KvDtype::kInt8);
  EXPECT_FALSE(parse_kv_dtype("int4").has_value());
  for (int32_t hd : {8, 20, 64, 128}) {
    const auto x = testing::random_floats(static_cast<size_t>(hd), 5);
    for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16, KvDtype::kInt8}) {
      const KvRowFormat f = kv_row_format(dt, hd);
      std::vector<uint8_t> row(f.row_bytes());
      std::vector<float> y(static_cast<size_t>(hd));
      kv_encode_row(f, x.data(), row.data());
      kv_decode_row(f, row.data(), y.data());
      for (int32_t g0 = 0; g0 < hd; g0 += f.group > 0 ? f.group : hd) {
        const int32_t g1 = f.group > 0 ? g0 + f.group : hd;
        float amax = 0.0f;
        for (int32_t i = g0; i < g1; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(i)]));
        for (int32_t i = g0; i < g1; ++i) {
          const float e = std::fabs(x[static_cast<size_t>(i)] - y[static_cast<size_t>(i)]);
          const float bound = dt == KvDtype::kF32 ? 0.0f
                              : dt == KvDtype::kF16 ? std::fabs(x[static_cast<size_t>(i)]) * 0x1p-11f
                                                    : amax / 127.0f * 0.502f + amax * 0x1p-11f;  // half a step (scale rounded to fp16)
          EXPECT_LE(e, bound) << kv_dtype_name(dt) << " hd " << hd << " i " << i;
        }
      }
    }
  }
}

// The latent cache of multi-head latent attention: one plane, each K row its own V, one kv head
// shared by all query heads, rows of 272 and 576 values (the explicit AVX-512 path) and 80 (the
// portable one), every page dtype, prefill and decode rows.
TEST(PagedAttention, OnePlaneLatentRowsMatchReference) {
  ThreadPool pool(2);
  std::vector<Seq> decodes;
  for (int32_t i = 0; i < 9; ++i) decodes.push_back({(i * 37) % 131, 1});
  for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16, KvDtype::kInt8}) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      for (int32_t hd : {80, 272, 576}) {
        check(16, 8, 1, hd, isa, &pool, kRagged, dt, 1);
        check(5, 16, 1, hd, isa, &pool, decodes, dt, 1);
      }
    }
  }
}

// DeepSeek-V2's per-head keys (the expanded prefill of multi-head latent attention, and the
// decompressed layout): head_dim 192 (the explicit AVX-512 path), no GQA (16 query tokens per
// work item), prefill chunks of 17 and 100 rows and a decode row, every page dtype.
TEST(PagedAttention, PerHeadKeysOf192MatchReference) {
  ThreadPool pool(2);
  for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16, KvDtype::kInt8}) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      check(16, 4, 4, 192, isa, &pool, kRagged, dt);
      check(5, 3, 3, 192, isa, nullptr, kRagged, dt);
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
