// Paged engine vs the contiguous reference forward, and batched vs one-sequence-at-a-time,
// on synthetic models: GQA ratios 1, 2, 4; both RoPE layouts; with and without Q/K/V bias;
// tied and untied heads; f32/f16/bf16/q8_0 weights; prompts of 1, 3, 17, 100 tokens; page
// sizes 1 and 16; every kernel path this CPU runs.
//
// Tolerances (max |a - b| over a logits row, relative to max |reference logit|):
// - f32/f16/bf16 weights: 1e-4. Engine and reference compute the same f32 products (the
//   half-precision weights convert to f32 exactly); only summation order differs, which moves
//   results by a few ulps per op (measured worst 1e-6 over these 2-layer models).
// - q8_0 weights vs the reference: 3e-2. The engine also quantizes activations to 8 bits per
//   32-block (as llama.cpp does), ~0.4% relative error per element that propagates through
//   the layers; the reference never quantizes activations (measured worst 0.017).
// - batched vs single: 1e-6. Each (row, token) dot product and each (token, head) attention
//   are computed in the same order whatever the batch, so they agree to the last bit in
//   practice; the margin covers nothing but compiler contraction differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <numeric>
#include <random>

#include "synth_model.h"
#include "tessera/worker/engine.h"

namespace tessera::worker {
namespace {

using testing::SynthModel;
using testing::SynthSpec;

// Hands out distinct pages in a shuffled order (so block tables are never contiguous).
class PageSource {
 public:
  PageSource(int32_t num_pages, uint64_t seed) : pages_(static_cast<size_t>(num_pages)) {
    std::iota(pages_.begin(), pages_.end(), 0);
    std::shuffle(pages_.begin(), pages_.end(), std::mt19937_64(seed));
  }
  void extend(std::vector<int32_t>& table, int32_t positions, int32_t page_size) {
    while (static_cast<int32_t>(table.size()) * page_size < positions) table.push_back(pages_.at(next_++));
  }

 private:
  std::vector<int32_t> pages_;
  size_t next_ = 0;
};

std::vector<int32_t> random_tokens(int32_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

double rel_diff(std::span<const float> a, std::span<const float> ref) {
  double mx = 0.0, d = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    mx = std::max(mx, std::fabs(static_cast<double>(ref[i])));
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - ref[i]));
  }
  return d / mx;
}

struct Seq {
  std::vector<int32_t> tokens;  // all tokens this sequence will ever compute
  std::vector<int32_t> table;
  int32_t done = 0;             // positions computed so far
};

// Runs `chunk` more tokens of each listed sequence as one batch; returns the last-token logits.
std::vector<std::vector<float>> step(Engine& e, PageSource& pages, std::vector<Seq*> seqs, std::vector<int32_t> chunks) {
  const int32_t ps = e.pool().page_size();
  std::vector<std::vector<int64_t>> slots(seqs.size());
  std::vector<SeqInput> batch;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    pages.extend(s.table, s.done + chunks[i], ps);
    for (int32_t p = s.done; p < s.done + chunks[i]; ++p) {
      slots[i].push_back(static_cast<int64_t>(s.table[static_cast<size_t>(p / ps)]) * ps + p % ps);
    }
    batch.push_back({.tokens = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(s.done), static_cast<size_t>(chunks[i])),
                     .start_pos = s.done, .block_table = s.table, .slot_mapping = slots[i], .want_logits = true});
  }
  auto r = e.forward(batch);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
  std::vector<std::vector<float>> out;
  const size_t vocab = static_cast<size_t>(e.model().config().vocab_size);
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->done += chunks[i];
    if (r.ok()) out.emplace_back(r->begin() + static_cast<std::ptrdiff_t>(i * vocab), r->begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
  }
  return out;
}

std::vector<kernels::Isa> isas() {
  std::vector<kernels::Isa> out;
  for (auto i : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (kernels::isa_supported(i)) out.push_back(i);
  }
  return out;
}

std::vector<SynthSpec> specs() {
  std::vector<SynthSpec> out;
  SynthSpec a;  // GQA 2, interleaved, untied
  out.push_back(a);
  SynthSpec b = a;  // GQA 1, halves, bias
  b.n_kv_heads = 4;
  b.rope_layout = RopeLayout::kHalves;
  b.attn_bias = true;
  b.seed = 2;
  out.push_back(b);
  SynthSpec c = a;  // GQA 4, tied, interleaved
  c.n_kv_heads = 1;
  c.tied = true;
  c.seed = 3;
  out.push_back(c);
  SynthSpec d = a;  // GQA 4 via 8 heads of 8, halves, bias, tied
  d.n_heads = 8;
  d.n_kv_heads = 2;
  d.head_dim = 8;
  d.rope_layout = RopeLayout::kHalves;
  d.attn_bias = true;
  d.tied = true;
  d.seed = 4;
  out.push_back(d);
  return out;
}

TEST(EngineEquivalence, PagedMatchesContiguousReference) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    double worst = 0.0;  // reported, so the margins behind the tolerances stay visible
    for (SynthSpec spec : specs()) {
      spec.dtype = dtype;
      if (dtype != DType::kF32 && spec.seed > 2) continue;  // other dtypes: two model shapes suffice
      const SynthModel model(spec);
      const double tol = dtype == DType::kQ8_0 ? 3e-2 : 1e-4;
      for (int32_t n : {1, 3, 17, 100}) {
        const int32_t extra = 3;  // decode steps after the prefill
        const auto tokens = random_tokens(n + extra, spec.vocab_size, static_cast<uint64_t>(n) * 7 + spec.seed);
        auto ref = reference_forward(model, tokens);
        ASSERT_TRUE(ref.ok()) << ref.error().to_string();
        const size_t vocab = static_cast<size_t>(spec.vocab_size);
        auto ref_row = [&](int32_t pos) { return std::span<const float>(*ref).subspan(static_cast<size_t>(pos) * vocab, vocab); };
        for (int32_t ps : {1, 16}) {
          for (kernels::Isa isa : isas()) {
            auto engine = Engine::create(model, {.pool = {.num_pages = 128, .page_size = ps}, .threads = 2, .isa = isa});
            ASSERT_TRUE(engine.ok()) << engine.error().to_string();
            PageSource pages(128, 99);
            Seq s{.tokens = tokens, .table = {}, .done = 0};
            const std::string what = spec.name() + " n=" + std::to_string(n) + " page_size=" + std::to_string(ps) +
                                     " isa=" + kernels::isa_name(isa);
            auto out = step(**engine, pages, {&s}, {n});
            ASSERT_EQ(out.size(), 1u);
            worst = std::max(worst, rel_diff(out[0], ref_row(n - 1)));
            EXPECT_LT(rel_diff(out[0], ref_row(n - 1)), tol) << what << " prefill";
            for (int32_t i = 0; i < extra; ++i) {
              out = step(**engine, pages, {&s}, {1});
              ASSERT_EQ(out.size(), 1u);
              worst = std::max(worst, rel_diff(out[0], ref_row(n + i)));
              EXPECT_LT(rel_diff(out[0], ref_row(n + i)), tol) << what << " decode " << i;
            }
          }
        }
      }
    }
    std::printf("paged vs reference, %s weights: worst max|diff| / max|logit| = %.3g\n", dtype_name(dtype), worst);
  }
}

TEST(EngineEquivalence, MixedBatchMatchesOneSequenceAtATime) {
  for (DType dtype : {DType::kF32, DType::kQ8_0}) {
    for (SynthSpec spec : specs()) {
      spec.dtype = dtype;
      const SynthModel model(spec);
      for (int32_t ps : {1, 16}) {
        for (kernels::Isa isa : isas()) {
          const EngineOptions opts{.pool = {.num_pages = 256, .page_size = ps}, .threads = 3, .isa = isa};
          auto batched = Engine::create(model, opts);
          auto single = Engine::create(model, opts);
          ASSERT_TRUE(batched.ok() && single.ok());
          PageSource pb(256, 1), psingle(256, 2);
          // A: 17-token prompt in chunks 10 + 7, then decodes. B: 3-token prompt, then decodes.
          // C: 100-token prompt in one chunk. D: a single token.
          std::vector<int32_t> a_chunks{10, 7, 1, 1}, b_chunks{3, 1, 1, 1}, c_chunks{0, 100, 1, 1}, d_chunks{0, 0, 1, 0};
          Seq a{random_tokens(19, spec.vocab_size, 1), {}, 0}, b{random_tokens(6, spec.vocab_size, 2), {}, 0},
              c{random_tokens(102, spec.vocab_size, 3), {}, 0}, d{random_tokens(1, spec.vocab_size, 4), {}, 0};
          Seq a1 = a, b1 = b, c1 = c, d1 = d;
          const std::string what = spec.name() + " page_size=" + std::to_string(ps) + " isa=" + kernels::isa_name(isa);
          for (size_t st = 0; st < 4; ++st) {
            std::vector<Seq*> seqs;
            std::vector<Seq*> singles;
            std::vector<int32_t> chunks;
            for (auto [s, s1, ch] : {std::tuple{&a, &a1, a_chunks[st]}, std::tuple{&b, &b1, b_chunks[st]},
                                     std::tuple{&c, &c1, c_chunks[st]}, std::tuple{&d, &d1, d_chunks[st]}}) {
              if (ch == 0) continue;
              seqs.push_back(s);
              singles.push_back(s1);
              chunks.push_back(ch);
            }
            const auto together = step(**batched, pb, seqs, chunks);
            ASSERT_EQ(together.size(), seqs.size());
            for (size_t i = 0; i < seqs.size(); ++i) {
              const auto alone = step(**single, psingle, {singles[i]}, {chunks[i]});
              ASSERT_EQ(alone.size(), 1u);
              EXPECT_LT(rel_diff(together[i], alone[0]), 1e-6) << what << " step " << st << " seq " << i;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera::worker
