// Multi-head latent attention over the latent K/V cache (docs/models.md, "The K/V cache holds the
// latent"): a prefill chunk (a sequence with at least EngineOptions::mla_expand_rows rows in a
// step) attends over per-head K/V expanded from its context's latent rows; fewer rows (decode)
// take the absorbed form. Both read the same latent rows, so they agree up to float rounding:
// a prompt prefilled in one chunk (expanded) gives the logits of the same tokens fed one at a
// time (absorbed), per weight type and page dtype; a step mixing both forms gives each
// sequence's logits alone; and a later chunk over a cached context matches too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tessera/model/model_synth.h"
#include "tessera/testing/paths.h"
#include "tessera/worker/engine.h"

#include "synth_file.h"

namespace tessera::worker {
namespace {

constexpr int32_t kPage = 8;

std::vector<int32_t> prompt(int32_t n, int32_t mul) {
  std::vector<int32_t> t = {1};
  for (int32_t i = 1; i < n; ++i) t.push_back((i * mul + 7) % 1000 + 3);
  return t;
}

// One sequence in its own pages [first_page, ...) of an engine.
struct Seq {
  std::vector<int32_t> tokens, table;
  explicit Seq(std::vector<int32_t> t, int32_t first_page) : tokens(std::move(t)) {
    for (int32_t p = 0; p <= static_cast<int32_t>(tokens.size()) / kPage; ++p) table.push_back(first_page + p);
  }
  std::vector<int64_t> slots(int32_t from, int32_t to) const {
    std::vector<int64_t> s;
    for (int32_t p = from; p < to; ++p) s.push_back(int64_t{table[static_cast<size_t>(p / kPage)]} * kPage + p % kPage);
    return s;
  }
};

std::unique_ptr<Engine> make_engine(const Model& m, kernels::KvDtype dtype, int32_t pages = 24) {
  auto e = Engine::create(m, {.pool = {.num_pages = pages, .page_size = kPage, .dtype = dtype}, .threads = 2});
  EXPECT_TRUE(e.ok()) << e.error().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

// Logits [to - from, vocab] of rows [from, to) of `s` prefilled in one step.
std::vector<float> chunk_logits(Engine& e, const Seq& s, int32_t from, int32_t to) {
  const auto slots = s.slots(from, to);
  const SeqInput in{.tokens = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(from), static_cast<size_t>(to - from)),
                    .start_pos = from, .block_table = s.table, .slot_mapping = slots, .all_logits = true};
  auto r = e.forward({&in, 1});
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return r.ok() ? std::vector<float>(r->begin(), r->end()) : std::vector<float>{};
}

// Logits of every row of `s` fed one token per step (the absorbed form throughout).
std::vector<float> one_by_one(Engine& e, const Seq& s) {
  std::vector<float> out;
  for (int32_t i = 0; i < static_cast<int32_t>(s.tokens.size()); ++i) {
    const std::vector<float> r = chunk_logits(e, s, i, i + 1);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

struct Diff {
  double max_abs = 0.0;
  int32_t argmax_equal = 0, rows = 0;
};

Diff diff(const std::vector<float>& a, const std::vector<float>& b, size_t vocab) {
  Diff d;
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size() || a.empty()) return d;
  d.rows = static_cast<int32_t>(a.size() / vocab);
  for (size_t r = 0; r < a.size() / vocab; ++r) {
    const auto ra = a.begin() + static_cast<std::ptrdiff_t>(r * vocab), rb = b.begin() + static_cast<std::ptrdiff_t>(r * vocab);
    d.argmax_equal += std::max_element(ra, ra + static_cast<std::ptrdiff_t>(vocab)) - ra ==
                              std::max_element(rb, rb + static_cast<std::ptrdiff_t>(vocab)) - rb
                          ? 1
                          : 0;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i]));
    d.max_abs = std::max(d.max_abs, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return d;
}

// A 48-token prompt in one chunk (expanded K/V) against the same tokens one at a time (absorbed),
// over f32 and f16 pages and weight types whose attn_kv_b matmul rounds the latent through Q8_K
// (Q4_K_M) and Q8_0 blocks; with f32 pages the chunk also equals the decompressed layout's chunk
// (what llama.cpp computes; measured bit-identical or 1.4e-6). Tolerances: the measured max
// |delta logit| with a margin: 5e-6 (V2 f32), 1.5e-4 (f16 pages), 1.9e-6 (Q4_K_M), 3e-5 (Lite
// f32); Lite Q8_0 1.45 and 42/48 argmax: its 27 layers of near-tied MoE routing amplify any
// float difference that crosses an 8-bit activation rounding boundary (the absorbed form in one
// chunk against itself token by token: 1.54 and 37/48; docs/models.md).
TEST(MlaPrefill, OneChunkMatchesTokenByToken) {
  struct Case {
    const char* shape;
    const char* dtype;
    kernels::KvDtype kv;
    double max_abs;
    int32_t min_argmax;
  };
  const Case cases[] = {{"deepseek-v2-reduced", "f32", kernels::KvDtype::kF32, 1e-4, 48},
                        {"deepseek-v2-reduced", "f32", kernels::KvDtype::kF16, 1e-3, 48},
                        {"deepseek-v2-reduced", "q4_k_m", kernels::KvDtype::kF32, 0.2, 46},
                        {"deepseek-v2-lite-reduced", "f32", kernels::KvDtype::kF32, 1e-3, 48},
                        {"deepseek-v2-lite-reduced", "q8_0", kernels::KvDtype::kF32, 2.0, 40}};
  const std::string dir = testing::make_temp_dir("mla-prefill");
  for (const Case& c : cases) {
    const std::string what = std::string(c.shape) + " " + c.dtype + " " + kernels::kv_dtype_name(c.kv) + " pages";
    const auto model = synth_and_load(c.shape, c.dtype, dir);
    ASSERT_TRUE(model != nullptr) << what;
    const auto vocab = static_cast<size_t>(model->config().vocab_size);
    const Seq s(prompt(48, 211), 0);
    auto chunked = make_engine(*model, c.kv);
    auto single = make_engine(*model, c.kv);
    ASSERT_TRUE(chunked && single);
    const std::vector<float> tbt = one_by_one(*single, s);
    const Diff d = diff(chunk_logits(*chunked, s, 0, 48), tbt, vocab);
    if (c.kv == kernels::KvDtype::kF32) {  // the expanded chunk is what the decompressed layout computes
      auto dec = Engine::create(*model, {.pool = {.num_pages = 24, .page_size = kPage, .mla_decompressed = true}, .threads = 2});
      ASSERT_TRUE(dec.ok()) << dec.error().to_string();
      const Diff dd = diff(chunk_logits(**dec, s, 0, 48), chunk_logits(*chunked, s, 0, 48), vocab);
      EXPECT_LE(dd.max_abs, 1e-5) << what << " (against the decompressed layout)";
    }
    std::printf("one chunk vs token by token  %-44s max |dlogit| %.2e  argmax %d/%d\n", what.c_str(), d.max_abs, d.argmax_equal, d.rows);
    EXPECT_LE(d.max_abs, c.max_abs) << what;
    EXPECT_GE(d.argmax_equal, c.min_argmax) << what;
  }
  std::filesystem::remove_all(dir);
}

// One step with [B decoding 1 row, A prefilling 40 rows, C decoding 1 row]: absorbed, expanded,
// absorbed runs in one layer loop; each sequence's logits equal those of it alone. Then a second
// chunk of A (rows 40..56 after 40 cached, expand threshold lowered to 16) against token by token.
TEST(MlaPrefill, MixedStepAndLaterChunk) {
  const std::string dir = testing::make_temp_dir("mla-mixed");
  const auto model = synth_and_load("deepseek-v2-reduced", "f32", dir);
  ASSERT_TRUE(model != nullptr);
  const auto vocab = static_cast<size_t>(model->config().vocab_size);
  const Seq a(prompt(56, 211), 0), b(prompt(9, 97), 8), c(prompt(5, 31), 10);
  auto ref = make_engine(*model, kernels::KvDtype::kF32);
  ASSERT_TRUE(ref);
  const std::vector<float> ra = one_by_one(*ref, a);
  const std::vector<float> rb = one_by_one(*ref, Seq(b.tokens, 12)), rc = one_by_one(*ref, Seq(c.tokens, 14));

  auto e = Engine::create(*model, {.pool = {.num_pages = 24, .page_size = kPage}, .threads = 2, .mla_expand_rows = 16});
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  chunk_logits(**e, b, 0, 8);  // 8 rows < 16: absorbed
  chunk_logits(**e, c, 0, 4);
  const auto sb = b.slots(8, 9), sa = a.slots(0, 40), sc = c.slots(4, 5);
  const SeqInput batch[] = {
      {.tokens = std::span<const int32_t>(b.tokens).subspan(8, 1), .start_pos = 8, .block_table = b.table, .slot_mapping = sb, .want_logits = true},
      {.tokens = std::span<const int32_t>(a.tokens).subspan(0, 40), .start_pos = 0, .block_table = a.table, .slot_mapping = sa, .want_logits = true},
      {.tokens = std::span<const int32_t>(c.tokens).subspan(4, 1), .start_pos = 4, .block_table = c.table, .slot_mapping = sc, .want_logits = true}};
  auto r = (*e)->forward(batch);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->size(), 3 * vocab);
  auto row = [&](const std::vector<float>& v, size_t i) { return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(i * vocab), v.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab)); };
  const std::vector<float> got(r->begin(), r->end());
  EXPECT_LT(diff(row(got, 0), row(rb, 8), vocab).max_abs, 1e-4);
  EXPECT_LT(diff(row(got, 1), row(ra, 39), vocab).max_abs, 1e-4);
  EXPECT_LT(diff(row(got, 2), row(rc, 4), vocab).max_abs, 1e-4);

  const std::vector<float> later = chunk_logits(**e, a, 40, 56);
  const std::vector<float> want(ra.begin() + static_cast<std::ptrdiff_t>(40 * vocab), ra.end());
  const Diff d = diff(later, want, vocab);
  EXPECT_LT(d.max_abs, 1e-4);
  EXPECT_EQ(d.argmax_equal, 16);
  std::filesystem::remove_all(dir);
}

TEST(MlaPrefill, RejectsANegativeThreshold) {
  const std::string dir = testing::make_temp_dir("mla-bad");
  const auto model = synth_and_load("deepseek-v2-reduced", "f32", dir);
  ASSERT_TRUE(model != nullptr);
  auto e = Engine::create(*model, {.pool = {.num_pages = 4, .page_size = kPage}, .threads = 1, .mla_expand_rows = -1});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().to_string().find("mla_expand_rows"), std::string::npos) << e.error().to_string();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::worker
