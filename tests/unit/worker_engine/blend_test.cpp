// CacheBlend (tessera/worker/blend.h) against a full prefill of the same prompt:
// - the chunk cache's LRU budget;
// - RoPE re-rotation is exact: layer 0's K of a reused chunk (context-free) equals a full
//   prefill's at the new position, for the interleaved (llama) and the halves (NEOX, qwen2) layouts;
// - recompute ratio 1 is a full prefill (logits to 1e-5, same greedy continuation);
// - quality vs ratio on stories260K (real weights, TinyStories documents) and a synthesized
//   SmolLM2-135M (random q8_0 weights, random documents): next-token logits NMSE
//   (sum (a - b)^2 / sum b^2) and greedy agreement of a continuation, against stated bounds; the
//   ratios 0 (full K/V reuse, the paper's baseline) and 0.15 (the default) must differ measurably.
// The rows printed as "[blend-quality]" are docs/BENCHMARKS.md's "CacheBlend quality" table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "tessera/model/model_synth.h"
#include "tessera/testing/paths.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tessera/worker/engine.h"

namespace tessera::worker {
namespace {

std::shared_ptr<const ChunkKv> chunk_of(int32_t tokens, int64_t floats) {
  auto kv = std::make_shared<ChunkKv>();
  kv->tokens.assign(static_cast<size_t>(tokens), 7);
  kv->k.assign(static_cast<size_t>(floats), 0.0f);
  kv->v.assign(static_cast<size_t>(floats), 0.0f);
  return kv;
}

TEST(ChunkKvCache, KeepsTheMostRecentlyUsedWithinItsBudget) {
  ChunkKvCache cache(3 * 800);  // three entries of 100 + 100 floats
  EXPECT_EQ(cache.insert(1, chunk_of(2, 100)), 0);
  EXPECT_EQ(cache.insert(2, chunk_of(2, 100)), 0);
  EXPECT_EQ(cache.insert(3, chunk_of(2, 100)), 0);
  const std::vector<int32_t> toks{7, 7}, none;
  ASSERT_NE(cache.find(1, toks, none, 0), nullptr);  // 1 becomes the most recent
  EXPECT_EQ(cache.insert(4, chunk_of(2, 100)), 1);  // evicts 2, the least recent
  EXPECT_EQ(cache.find(2, toks, none, 0), nullptr);
  EXPECT_NE(cache.find(1, toks, none, 0), nullptr);
  EXPECT_EQ(cache.size(), 3);
  EXPECT_EQ(cache.bytes(), 3 * 800);
  EXPECT_EQ(cache.insert(5, chunk_of(2, 1000)), 0);
  EXPECT_EQ(cache.find(5, toks, none, 0), nullptr) << "larger than the whole budget: not kept";
  EXPECT_LE(cache.bytes(), cache.budget());
}

// A colliding key (same 64-bit key, other content) is a miss whatever differs: the chunk's
// tokens, the anchor's tokens (not only their hash) or the namespace salt.
TEST(ChunkKvCache, AKeyCollisionIsAMissUnlessTokensAnchorAndSaltAllMatch) {
  ChunkKvCache cache(1 << 20);
  auto kv = std::make_shared<ChunkKv>(*chunk_of(2, 100));
  kv->anchor = {1, 2, 3};
  kv->salt = 0xabc;
  cache.insert(42, kv);
  const std::vector<int32_t> toks{7, 7}, anchor{1, 2, 3};
  EXPECT_NE(cache.find(42, toks, anchor, 0xabc), nullptr);
  EXPECT_EQ(cache.find(42, std::vector<int32_t>{7, 8}, anchor, 0xabc), nullptr) << "other chunk tokens";
  EXPECT_EQ(cache.find(42, toks, std::vector<int32_t>{1, 2, 4}, 0xabc), nullptr) << "other anchor";
  EXPECT_EQ(cache.find(42, toks, std::vector<int32_t>{1, 2}, 0xabc), nullptr) << "shorter anchor";
  EXPECT_EQ(cache.find(42, toks, anchor, 0xabd), nullptr) << "other namespace (salt)";
  EXPECT_NE(cache.find(42, toks, anchor, 0xabc), nullptr) << "the misses left the entry in place";
}

// A prompt: anchor, documents, question; and its chunk spans.
struct Prompt {
  std::vector<int32_t> tokens;
  std::vector<ChunkSpan> chunks;
};

Prompt assemble(const std::vector<int32_t>& anchor, const std::vector<std::vector<int32_t>>& docs,
                const std::vector<int32_t>& question) {
  Prompt p;
  p.tokens = anchor;
  for (const auto& d : docs) {
    p.chunks.push_back({.begin = static_cast<int32_t>(p.tokens.size()), .length = static_cast<int32_t>(d.size())});
    p.tokens.insert(p.tokens.end(), d.begin(), d.end());
  }
  p.tokens.insert(p.tokens.end(), question.begin(), question.end());
  return p;
}

std::vector<int32_t> pages(int32_t first, int32_t count) {
  std::vector<int32_t> t(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) t[static_cast<size_t>(i)] = first + i;
  return t;
}

std::vector<int64_t> slots_of(const std::vector<int32_t>& table, int32_t ps, int32_t from, int32_t n) {
  std::vector<int64_t> s;
  for (int32_t p = from; p < from + n; ++p) s.push_back(static_cast<int64_t>(table[static_cast<size_t>(p / ps)]) * ps + p % ps);
  return s;
}

// Greedy continuation of `steps` tokens from a prefilled sequence whose last logits are `logits`.
std::vector<int32_t> continue_greedy(Engine& e, const std::vector<int32_t>& table, int32_t n, std::vector<float> logits, int steps) {
  std::vector<int32_t> out;
  for (int s = 0; s < steps; ++s) {
    const auto tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(tok);
    if (s + 1 == steps) break;
    const std::vector<int32_t> one{tok};
    const auto slot = slots_of(table, e.pool().page_size(), n + s, 1);
    const SeqInput in{.tokens = one, .start_pos = n + s, .block_table = table, .slot_mapping = slot, .want_logits = true};
    auto l = e.forward(std::span(&in, 1));
    EXPECT_TRUE(l.ok()) << l.error().to_string();
    if (!l.ok()) break;
    logits.assign(l->begin(), l->end());
  }
  return out;
}

std::vector<float> full_prefill(Engine& e, const std::vector<int32_t>& tokens, const std::vector<int32_t>& table) {
  const auto n = static_cast<int32_t>(tokens.size());
  const auto slots = slots_of(table, e.pool().page_size(), 0, n);
  const SeqInput in{.tokens = tokens, .start_pos = 0, .block_table = table, .slot_mapping = slots, .want_logits = true};
  auto l = e.forward(std::span(&in, 1));
  EXPECT_TRUE(l.ok()) << l.error().to_string();
  return l.ok() ? std::vector<float>(l->begin(), l->end()) : std::vector<float>{};
}

// The blend of `p` as the scheduler plans a prompt longer than a step's token budget: chunks of
// `budget` tokens (0: one call), each blended over the K/V the earlier ones left when it reaches a
// document (the documents from the first to the last it reaches, whole: tokens run past the
// chunk's end to complete that last one), else an ordinary prefill chunk. Outcome counts summed;
// logits of the last chunk.
Result<BlendOutcome> blend_in_steps(Engine& e, const Prompt& p, const std::vector<int32_t>& table, float ratio, int32_t budget,
                                    std::vector<float>& logits, uint64_t salt = 0) {
  const auto n = static_cast<int32_t>(p.tokens.size());
  BlendOutcome sum;
  for (int32_t start = 0; start < n;) {
    const int32_t end = budget > 0 ? std::min(n, start + budget) : n;
    std::vector<ChunkSpan> chunks;
    bool reaches = false;
    for (const ChunkSpan& c : p.chunks) {
      if (c.begin >= end) break;
      chunks.push_back(c);
      reaches = reaches || c.begin + c.length > start;
    }
    std::span<const float> l;
    if (reaches) {
      const int32_t upto = std::max(end, chunks.back().begin + chunks.back().length);
      auto b = e.backend().blend_prefill({.tokens = std::span(p.tokens).first(static_cast<size_t>(upto)), .cached = start,
                                          .chunks = chunks, .block_table = table, .salt = salt, .recompute_ratio = ratio,
                                          .want_logits = end == n, .end = end});
      if (!b.ok()) return b.take_error();
      sum.reused_tokens += b->reused_tokens;
      sum.hit_tokens += b->hit_tokens;
      sum.recomputed_tokens += b->recomputed_tokens;
      sum.computed_tokens += b->computed_tokens;
      sum.chunk_hits += b->chunk_hits;
      sum.chunk_misses += b->chunk_misses;
      l = b->logits;
    } else {
      const std::span<const int32_t> toks = std::span(p.tokens).subspan(static_cast<size_t>(start), static_cast<size_t>(end - start));
      const auto slots = slots_of(table, e.pool().page_size(), start, end - start);
      const SeqInput in{.tokens = toks, .start_pos = start, .block_table = table, .slot_mapping = slots, .want_logits = end == n};
      auto f = e.forward(std::span(&in, 1));
      if (!f.ok()) return f.take_error();
      l = *f;
    }
    if (end == n) logits.assign(l.begin(), l.end());
    start = end;
  }
  return sum;
}

double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return num / den;
}

struct Quality {
  double num = 0.0, den = 0.0;
  int argmax_agree = 0, prompts = 0, cont_agree = 0, cont_total = 0, recomputed = 0, reused = 0;
  double nmse() const { return den > 0.0 ? num / den : 0.0; }
};

// Runs every prompt as a full prefill (pages [0, P)) and blended at `ratio` (pages [P, 2P)), in
// chunks of `budget` tokens (0: one call).
Quality measure(Engine& e, const std::vector<Prompt>& prompts, float ratio, int steps, int32_t budget = 0) {
  Quality q;
  const int32_t ps = e.pool().page_size();
  for (const Prompt& p : prompts) {
    const auto n = static_cast<int32_t>(p.tokens.size());
    const int32_t np = (n + steps + ps - 1) / ps;
    const auto full_table = pages(0, np), blend_table = pages(np, np);
    const std::vector<float> ref = full_prefill(e, p.tokens, full_table);
    const std::vector<int32_t> ref_cont = continue_greedy(e, full_table, n, ref, steps);
    std::vector<float> got;
    auto b = blend_in_steps(e, p, blend_table, ratio, budget, got);
    EXPECT_TRUE(b.ok()) << b.error().to_string();
    if (!b.ok()) return q;
    q.recomputed += b->recomputed_tokens;
    q.reused += b->reused_tokens;
    for (size_t i = 0; i < ref.size(); ++i) {
      q.num += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
      q.den += static_cast<double>(ref[i]) * ref[i];
    }
    const std::vector<int32_t> cont = continue_greedy(e, blend_table, n, got, steps);
    q.argmax_agree += cont[0] == ref_cont[0] ? 1 : 0;
    ++q.prompts;
    for (size_t i = 0; i < cont.size(); ++i) q.cont_agree += cont[i] == ref_cont[i] ? 1 : 0;
    q.cont_total += static_cast<int>(cont.size());
  }
  return q;
}

void print_row(const char* model, float ratio, const Quality& q, int32_t budget = 0) {
  std::printf("[blend-quality] | %s%s | %.0f %% | %d / %d | %.3g | %d / %d | %d / %d |\n", model,
              budget > 0 ? (", steps of " + std::to_string(budget) + " tokens").c_str() : "", 100.0 * ratio, q.recomputed,
              q.reused, q.nmse(), q.argmax_agree, q.prompts, q.cont_agree, q.cont_total);
}

std::unique_ptr<Engine> make_engine(const Model& m, int32_t num_pages) {
  auto e = Engine::create(m, {.pool = {.num_pages = num_pages, .page_size = 16}, .threads = 2});
  EXPECT_TRUE(e.ok()) << e.error().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

// Layer 0's K is context-free, so after re-rotation a reused chunk's layer-0 K must equal a full
// prefill's at the new position (ratio 0: reused K/V kept in every layer).
void expect_exact_rotation(Engine& e, const Prompt& p) {
  const int32_t ps = e.pool().page_size();
  const auto n = static_cast<int32_t>(p.tokens.size());
  const int32_t np = (n + ps - 1) / ps;
  const auto a = pages(0, np), b = pages(np, np);
  full_prefill(e, p.tokens, a);
  auto r = e.backend().blend_prefill({.tokens = p.tokens, .chunks = p.chunks, .block_table = b, .recompute_ratio = 0.0f});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  const int64_t tf = e.pool().token_floats();
  std::vector<float> ka(static_cast<size_t>(tf)), kb(ka.size());
  double worst = 0.0;
  for (const ChunkSpan& c : p.chunks) {
    for (int32_t i = c.begin; i < c.begin + c.length; ++i) {
      e.pool().load(0, slots_of(a, ps, i, 1)[0], 0, ka.data());
      e.pool().load(0, slots_of(b, ps, i, 1)[0], 0, kb.data());
      double num = 0.0, den = 0.0;
      for (size_t j = 0; j < ka.size(); ++j) {
        num += (ka[j] - kb[j]) * (ka[j] - kb[j]);
        den += ka[j] * ka[j];
      }
      worst = std::max(worst, std::sqrt(num / den));
    }
  }
  EXPECT_LT(worst, 2e-5) << "worst relative error of a re-rotated layer-0 K row";
}

class Stories : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = load_model(tessera::testing::shared_path("models/stories260K/stories260K.bin"));
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    model_ = std::move(*m).release();
    auto tok = load_tokenizer(tessera::testing::shared_path("models/stories260K/tok512.bin"));
    ASSERT_TRUE(tok.ok()) << tok.error().to_string();
    const std::vector<std::string> docs = {
        "Tom had a red ball. He liked to play with it in the park every day.",
        "Lily found a little cat under a tree. The cat was sad and hungry.",
        "The sun was big and warm. Birds sang songs in the blue sky.",
        "Ben and Sue went to the beach. They built a big sand castle.",
    };
    std::vector<std::vector<int32_t>> d;
    for (const auto& s : docs) d.push_back((*tok)->encode(s, false));
    const std::vector<int32_t> anchor{1};  // BOS
    const std::vector<int32_t> question = (*tok)->encode("Once upon a time, there was a little girl named", false);
    // Four orders of the four documents: the reorderings CacheBlend is for.
    const std::vector<std::vector<int>> orders = {{0, 1, 2, 3}, {2, 0, 3, 1}, {3, 2, 1, 0}, {1, 3, 0, 2}};
    for (const auto& o : orders) {
      std::vector<std::vector<int32_t>> ds;
      for (int i : o) ds.push_back(d[static_cast<size_t>(i)]);
      prompts_.push_back(assemble(anchor, ds, question));
    }
  }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
  static std::vector<Prompt> prompts_;
};
Model* Stories::model_ = nullptr;
std::vector<Prompt> Stories::prompts_;

TEST_F(Stories, ReRotationIsExact) {
  auto e = make_engine(*model_, 32);
  expect_exact_rotation(*e, prompts_[1]);
}

TEST_F(Stories, FullRecomputeIsAFullPrefill) {
  auto e = make_engine(*model_, 32);
  const Quality q = measure(*e, prompts_, 1.0f, 16);
  EXPECT_LT(q.nmse(), 1e-10);
  EXPECT_EQ(q.cont_agree, q.cont_total);
  print_row("stories260K", 1.0f, q);
}

TEST_F(Stories, QualityVsRecomputeRatio) {
  auto e = make_engine(*model_, 32);
  std::vector<Quality> qs;
  for (float r : {0.0f, 0.05f, 0.15f, 0.3f, 1.0f}) {
    qs.push_back(measure(*e, prompts_, r, 16));
    print_row("stories260K", r, qs.back());
  }
  // Stated bounds (measured values in docs/BENCHMARKS.md "CacheBlend quality").
  EXPECT_GT(qs[0].nmse(), 1.5 * qs[2].nmse()) << "the default 15 % must be measurably better than full reuse";
  EXPECT_LT(qs[3].nmse(), qs[0].nmse() / 4.0);
  EXPECT_GT(qs[2].cont_agree, qs[0].cont_agree);
  EXPECT_LT(qs[2].nmse(), 1e-3);
  EXPECT_GE(qs[2].cont_agree, 54) << "of 64 continuation tokens";
  EXPECT_EQ(qs[2].argmax_agree, 4);
  EXPECT_LT(qs[4].nmse(), 1e-10);
}

// A prompt longer than a step's budget is blended over several steps (the scheduler's plan,
// docs/kv.md): ratio 1 is still a full prefill and ratio 0 (nothing selected) the one-step blend,
// to the same 1e-10 as above; at the default 15 % (HKVD ranks each step's reused tokens) the
// quality bounds of the one-step blend hold. Budgets of 7 and 24 tokens cut through documents;
// 16 lands on page boundaries.
TEST_F(Stories, BlendOverSeveralStepsKeepsTheOneStepQuality) {
  auto e = make_engine(*model_, 32);
  for (int32_t budget : {7, 16, 24}) {
    SCOPED_TRACE(budget);
    const Quality full = measure(*e, prompts_, 1.0f, 16, budget);
    EXPECT_LT(full.nmse(), 1e-10);
    EXPECT_EQ(full.cont_agree, full.cont_total);
    const int32_t ps = e->pool().page_size();
    for (const Prompt& p : prompts_) {
      const auto table = pages(0, (static_cast<int32_t>(p.tokens.size()) + ps - 1) / ps);
      std::vector<float> one, split;
      ASSERT_TRUE(blend_in_steps(*e, p, table, 0.0f, 0, one).ok());
      auto r = blend_in_steps(*e, p, table, 0.0f, budget, split);
      ASSERT_TRUE(r.ok()) << r.error().to_string();
      EXPECT_LT(nmse(split, one), 1e-10) << "ratio 0 in steps vs one step";
      int32_t doc_tokens = 0;
      for (const ChunkSpan& c : p.chunks) doc_tokens += c.length;
      EXPECT_EQ(r->reused_tokens, doc_tokens) << "every document token reused once";
      EXPECT_EQ(r->chunk_hits, 4) << "each document looked up once where it starts (the cache holds them)";
      EXPECT_EQ(r->chunk_misses, 0);
      EXPECT_EQ(r->hit_tokens, doc_tokens);
      // A cold cache (another salt): every document computed once, none counted as reused, also
      // those a later step continues from the cache.
      auto cold = blend_in_steps(*e, p, table, 0.0f, budget, split, 1000 + 100 * static_cast<uint64_t>(budget) + static_cast<uint64_t>(&p - prompts_.data()));
      ASSERT_TRUE(cold.ok());
      EXPECT_EQ(cold->chunk_misses, 4);
      EXPECT_EQ(cold->chunk_hits, 0);
      EXPECT_EQ(cold->hit_tokens, 0);
    }
    const Quality q = measure(*e, prompts_, 0.15f, 16, budget);
    print_row("stories260K", 0.15f, q, budget);
    EXPECT_LT(q.nmse(), 1e-3);
    EXPECT_GE(q.cont_agree, 54) << "of 64 continuation tokens";
    EXPECT_EQ(q.argmax_agree, 4);
  }
}

TEST_F(Stories, BlendStepsCheckTheirBounds) {
  auto e = make_engine(*model_, 32);
  const auto table = pages(0, 8);
  const Prompt& p = prompts_[0];
  auto r = e->backend().blend_prefill({.tokens = p.tokens, .cached = 10, .chunks = p.chunks, .block_table = table,
                                       .end = static_cast<int32_t>(p.tokens.size()) + 1});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("end"), std::string::npos) << r.error().message;
  r = e->backend().blend_prefill({.tokens = p.tokens, .cached = 10, .chunks = p.chunks, .block_table = table, .end = 10});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("cached"), std::string::npos) << r.error().message;
}

TEST_F(Stories, ChunksHitTheCacheInAnyOrderAndTheAnswerIsCacheIndependent) {
  auto e = make_engine(*model_, 32);
  const auto table = pages(0, 8);
  auto first = e->backend().blend_prefill({.tokens = prompts_[0].tokens, .chunks = prompts_[0].chunks, .block_table = table});
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  EXPECT_EQ(first->chunk_misses, 4);
  const std::vector<float> cold(first->logits.begin(), first->logits.end());
  auto again = e->backend().blend_prefill({.tokens = prompts_[2].tokens, .chunks = prompts_[2].chunks, .block_table = table});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->chunk_hits, 4);
  EXPECT_EQ(again->hit_tokens, again->reused_tokens);
  EXPECT_EQ(e->backend().blend_stats().cached_chunks, 4);
  // The same prompt with a warm cache gives the same logits as with a cold one.
  auto warm = e->backend().blend_prefill({.tokens = prompts_[0].tokens, .chunks = prompts_[0].chunks, .block_table = table});
  ASSERT_TRUE(warm.ok());
  ASSERT_EQ(warm->chunk_hits, 4);
  for (size_t i = 0; i < cold.size(); ++i) ASSERT_EQ(warm->logits[i], cold[i]) << i;
  // Another salt (tenant) shares nothing.
  auto other = e->backend().blend_prefill({.tokens = prompts_[0].tokens, .chunks = prompts_[0].chunks, .block_table = table, .salt = 5});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->chunk_hits, 0);
}

TEST_F(Stories, BadInputNamesTheField) {
  auto e = make_engine(*model_, 32);
  const auto table = pages(0, 8);
  const std::vector<ChunkSpan> overlap{{.begin = 1, .length = 5}, {.begin = 3, .length = 2}};
  auto r = e->backend().blend_prefill({.tokens = prompts_[0].tokens, .chunks = overlap, .block_table = table});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("chunks[1]"), std::string::npos) << r.error().message;
  const auto short_table = pages(0, 1);
  r = e->backend().blend_prefill({.tokens = prompts_[0].tokens, .chunks = prompts_[0].chunks, .block_table = short_table});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("block_table"), std::string::npos) << r.error().message;
}

// A SmolLM2-135M-shaped model with random q8_0 weights (the real shape: 30 layers, GQA 9/3, head_dim 64).
class Smol : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(tessera::testing::make_temp_dir("blend-test"));
    SynthOptions o;
    o.like = "smollm2-135m";
    o.dtype = DType::kQ8_0;
    o.out_path = *dir_ + "/smol.gguf";
    const Status st = synth_model(o);
    ASSERT_TRUE(st.ok()) << st.error().to_string();
    auto m = load_model(o.out_path);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    model_ = std::move(*m).release();
    std::mt19937 rng(15);
    std::uniform_int_distribution<int32_t> tok(300, model_->config().vocab_size - 1);
    auto random_tokens = [&](int n) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (auto& t : v) t = tok(rng);
      return v;
    };
    const std::vector<int32_t> anchor = random_tokens(6);
    std::vector<std::vector<int32_t>> d;
    for (int i = 0; i < 3; ++i) d.push_back(random_tokens(24));
    const std::vector<int32_t> question = random_tokens(8);
    for (const auto& o2 : std::vector<std::vector<int>>{{0, 1, 2}, {2, 0, 1}}) {
      std::vector<std::vector<int32_t>> ds;
      for (int i : o2) ds.push_back(d[static_cast<size_t>(i)]);
      prompts_.push_back(assemble(anchor, ds, question));
    }
  }
  static void TearDownTestSuite() {
    delete model_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static Model* model_;
  static std::string* dir_;
  static std::vector<Prompt> prompts_;
};
Model* Smol::model_ = nullptr;
std::string* Smol::dir_ = nullptr;
std::vector<Prompt> Smol::prompts_;

TEST_F(Smol, QualityVsRecomputeRatio) {
  auto e = make_engine(*model_, 24);
  expect_exact_rotation(*e, prompts_[1]);
  std::vector<Quality> qs;
  for (float r : {0.0f, 0.05f, 0.15f, 0.3f, 1.0f}) {
    qs.push_back(measure(*e, prompts_, r, 8));
    print_row("SmolLM2-135M synth q8_0", r, qs.back());
  }
  // Random weights: attention is nearly uniform, so no few tokens carry the deviation and the
  // gain is roughly proportional to the ratio; logits are nearly flat, so argmax is noise.
  EXPECT_GT(qs[0].nmse(), 1.3 * qs[2].nmse());
  EXPECT_LT(qs[3].nmse(), qs[0].nmse() / 1.5);
  EXPECT_LT(qs[2].nmse(), 0.3);
  EXPECT_LT(qs[4].nmse(), 1e-10);
  EXPECT_EQ(qs[4].cont_agree, qs[4].cont_total);
}

// The halves (NEOX) RoPE layout and attention biases: a qwen2.5-shaped model.
TEST(BlendRope, ReRotationIsExactForNeox) {
  const std::string dir = tessera::testing::make_temp_dir("blend-qwen");
  SynthOptions o;
  o.like = "qwen2.5-0.5b-reduced";
  o.out_path = dir + "/q.gguf";
  ASSERT_TRUE(synth_model(o).ok());
  auto m = load_model(o.out_path);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  ASSERT_EQ((*m)->config().rope_layout, RopeLayout::kHalves);
  std::vector<std::vector<int32_t>> d = {{300, 301, 302, 303, 304, 305}, {400, 401, 402, 403, 404, 405, 406}};
  const Prompt p = assemble({5, 6, 7}, {d[1], d[0]}, {500, 501});
  auto e = make_engine(**m, 8);
  expect_exact_rotation(*e, p);
  std::filesystem::remove_all(dir);
}


// Ratio 1 is a full prefill for every family the blended layer loop runs (it shares forward.cpp's
// per-layer step): per-head Q/K norms (Qwen3), a mixture-of-experts MLP (Qwen3-MoE), post-norms,
// soft-capping and sliding windows (Gemma 2), fused-then-split projections (Phi-3).
TEST(BlendFamilies, FullRecomputeIsAFullPrefill) {
  for (const char* like : {"qwen3-0.6b-reduced", "qwen3-30b-a3b-reduced", "gemma2-2b-reduced", "phi3-mini-reduced"}) {
    SCOPED_TRACE(like);
    const std::string dir = tessera::testing::make_temp_dir("blend-family");
    SynthOptions o;
    o.like = like;
    o.out_path = dir + "/m.gguf";
    ASSERT_TRUE(synth_model(o).ok());
    auto m = load_model(o.out_path);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    const std::vector<std::vector<int32_t>> d = {{300, 301, 302, 303, 304, 305, 306, 307, 308}, {400, 401, 402, 403, 404, 405, 406}};
    const std::vector<Prompt> prompts = {assemble({5, 6, 7}, {d[0], d[1]}, {500, 501}), assemble({5, 6, 7}, {d[1], d[0]}, {500, 501})};
    auto e = make_engine(**m, 16);
    const Quality q = measure(*e, prompts, 1.0f, 4);
    EXPECT_LT(q.nmse(), 1e-10);
    EXPECT_EQ(q.cont_agree, q.cont_total);
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace tessera::worker
