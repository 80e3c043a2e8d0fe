// Engine::execute: plans that must be refused (and leave the pool untouched), page copies,
// per-request sampler state, releases, seeded sampling.
#include <gtest/gtest.h>

#include <algorithm>

#include "synth_model.h"
#include "tessera/worker/engine.h"

namespace tessera::worker {
namespace {

using testing::SynthModel;
using testing::SynthSpec;

constexpr int32_t kPageSize = 4;

SeqPlan seq(uint64_t id, std::vector<int32_t> tokens, int32_t start, std::vector<int32_t> table, bool sample = true) {
  SeqPlan s;
  s.request_id = id;
  s.tokens = std::move(tokens);
  s.start_pos = start;
  s.block_table = std::move(table);
  // Slots of the positions the table covers; a test that gives too short a table (to see it
  // refused) fills the rest of slot_mapping itself.
  for (int32_t i = 0; i < static_cast<int32_t>(s.tokens.size()); ++i) {
    const int32_t p = start + i;
    const auto page = static_cast<size_t>(p / kPageSize);
    if (page >= s.block_table.size()) break;
    s.slot_mapping.push_back(static_cast<int64_t>(s.block_table[page]) * kPageSize + p % kPageSize);
  }
  s.sample = sample;
  s.sampling.temperature = 0.0f;
  return s;
}

class ExecuteTest : public ::testing::Test {
 protected:
  ExecuteTest() : model_(SynthSpec{}) {
    auto e = Engine::create(model_, {.pool = {.num_pages = 8, .page_size = kPageSize}, .threads = 2, .isa = std::nullopt});
    TS_CHECK(e.ok()) << e.error().to_string();
    engine_ = std::move(*e);
  }
  std::vector<float> pool_snapshot() {
    std::vector<float> out;
    for (int32_t l = 0; l < engine_->pool().num_layers(); ++l) {
      const float* p = engine_->pool().layer(l);
      out.insert(out.end(), p, p + engine_->pool().bytes() / sizeof(float) / static_cast<size_t>(engine_->pool().num_layers()));
    }
    return out;
  }
  void expect_refused(const StepPlan& plan, ErrorCode code, const std::string& needle) {
    const auto before = pool_snapshot();
    auto r = engine_->execute(plan);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, code) << r.error().to_string();
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
    EXPECT_EQ(pool_snapshot(), before) << "a refused plan changed the pool";
  }

  SynthModel model_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(ExecuteTest, BadPlansAreRefusedWithoutSideEffects) {
  StepPlan p;
  p.seqs.push_back(seq(1, {1, 2, 3}, 0, {0}));
  p.seqs[0].block_table = {8};  // page outside the pool
  p.seqs[0].slot_mapping = {32, 33, 34};
  expect_refused(p, ErrorCode::kOutOfRange, "block_table[0] = 8");

  p.seqs = {seq(1, {1, 2, 3, 4, 5}, 0, {0})};  // 5 positions need 2 pages
  p.seqs[0].slot_mapping.resize(5, 0);
  expect_refused(p, ErrorCode::kInvalidArgument, "need 2");

  p.seqs = {seq(1, {1, 2, 3}, 0, {2})};
  p.seqs[0].slot_mapping[1] = 5;  // inconsistent with the block table
  expect_refused(p, ErrorCode::kInvalidArgument, "slot_mapping[1] = 5");

  p.seqs = {seq(1, {1, 2}, 0, {2})};
  p.seqs[0].slot_mapping.pop_back();
  expect_refused(p, ErrorCode::kInvalidArgument, "slot_mapping has 1 entries for 2 tokens");

  p.seqs = {seq(1, {1, 97}, 0, {2})};
  expect_refused(p, ErrorCode::kOutOfRange, "token 97");

  p.seqs = {seq(1, {}, 0, {2})};
  expect_refused(p, ErrorCode::kInvalidArgument, "no tokens");

  p.seqs = {seq(1, {1}, -1, {2})};
  p.seqs[0].slot_mapping = {8};
  expect_refused(p, ErrorCode::kOutOfRange, "start_pos");

  p.seqs = {seq(1, {1}, 0, {2}), seq(1, {2}, 0, {3})};
  expect_refused(p, ErrorCode::kInvalidArgument, "appears twice");

  p.seqs = {seq(1, {1}, 0, {2})};
  p.seqs[0].sampling.top_p = 0.0f;
  p.seqs[0].sampling.temperature = 1.0f;
  expect_refused(p, ErrorCode::kInvalidArgument, "top_p");

  p.seqs = {seq(1, {1}, 0, {2})};
  p.copies = {{.src = 0, .dst = 9}};
  expect_refused(p, ErrorCode::kOutOfRange, "copies[0]");

  p.copies.clear();
  p.fills.push_back({.request_id = 1, .blob_key = "k", .pages = {3}, .num_tokens = 2, .alpha = 0.5f});
  expect_refused(p, ErrorCode::kUnsupported, "not implemented yet: kvstore fill");
}

TEST_F(ExecuteTest, GreedyStepsMatchReferenceArgmax) {
  // Prompt of 6 tokens, then 5 greedy decode steps through execute().
  std::vector<int32_t> all = {5, 17, 42, 3, 88, 9};
  StepPlan p;
  p.step_id = 1;
  p.seqs.push_back(seq(7, all, 0, {3, 1}));
  for (int step = 0; step < 5; ++step) {
    auto r = engine_->execute(p);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    ASSERT_EQ(r->results.size(), 1u);
    EXPECT_EQ(r->step_id, p.step_id);
    auto ref = reference_forward(model_, all);
    ASSERT_TRUE(ref.ok());
    const auto last = std::span<const float>(*ref).subspan(all.size() * 97 - 97, 97);
    const int32_t want = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    EXPECT_EQ(r->results[0].token, want) << "step " << step;
    all.push_back(r->results[0].token);
    const int32_t pos = static_cast<int32_t>(all.size()) - 1;
    p = StepPlan{};
    p.step_id = static_cast<uint64_t>(step) + 2;
    p.seqs.push_back(seq(7, {all.back()}, pos, {3, 1, 6}));
  }
}

TEST_F(ExecuteTest, PageCopyDuplicatesKvInEveryLayer) {
  StepPlan p;
  p.seqs.push_back(seq(1, {1, 2, 3}, 0, {5}, false));
  ASSERT_TRUE(engine_->execute(p).ok());
  StepPlan c;
  c.copies = {{.src = 5, .dst = 2}};
  auto r = engine_->execute(c);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_TRUE(r->results.empty());
  KvPool& pool = engine_->pool();
  for (int32_t l = 0; l < pool.num_layers(); ++l) {
    for (int32_t off = 0; off < 3; ++off) {
      const float* a = pool.key(l, 5 * kPageSize + off);
      const float* b = pool.key(l, 2 * kPageSize + off);
      EXPECT_TRUE(std::equal(a, a + pool.token_floats(), b));
      EXPECT_TRUE(std::equal(pool.value(l, 5 * kPageSize + off), pool.value(l, 5 * kPageSize + off) + pool.token_floats(),
                             pool.value(l, 2 * kPageSize + off)));
    }
  }
  // A continuation on the copy gives the same logits as on the original.
  StepPlan on_orig, on_copy;
  on_orig.seqs.push_back(seq(2, {4}, 3, {5}));
  on_copy.seqs.push_back(seq(3, {4}, 3, {2}));
  auto ro = engine_->execute(on_orig);
  auto rc = engine_->execute(on_copy);
  ASSERT_TRUE(ro.ok() && rc.ok());
  EXPECT_EQ(ro->results[0].token, rc->results[0].token);
}

TEST_F(ExecuteTest, SamplerStateLivesUntilReleased) {
  StepPlan p;
  p.seqs.push_back(seq(11, {1, 2}, 0, {0}));
  p.seqs.push_back(seq(12, {3}, 0, {1}));
  p.seqs.push_back(seq(13, {3}, 0, {4}, false));  // no sampling, no state
  ASSERT_TRUE(engine_->execute(p).ok());
  EXPECT_EQ(engine_->num_request_states(), 2u);
  StepPlan rel;
  rel.released = {11, 999};
  ASSERT_TRUE(engine_->execute(rel).ok());
  EXPECT_EQ(engine_->num_request_states(), 1u);
}

TEST_F(ExecuteTest, ResetRequestsDropsEverySamplerState) {
  // Request 21 samples with a seed, then the engine forgets it (a worker registering again); the
  // same id with the same seed must start a fresh RNG, giving the first run's first token.
  auto first_token = [&](uint64_t id) {
    StepPlan p;
    SeqPlan s = seq(id, {1, 2, 3}, 0, {0});
    s.sampling.temperature = 1.5f;
    s.sampling.seed = 77;
    p.seqs.push_back(s);
    auto r = engine_->execute(p);
    TS_CHECK(r.ok()) << r.error().to_string();
    return r->results.at(0).token;
  };
  std::vector<int32_t> stale;
  const int32_t t0 = first_token(21);
  for (int i = 0; i < 8; ++i) stale.push_back(first_token(21));  // same id, RNG advances
  EXPECT_EQ(engine_->num_request_states(), 1u);
  engine_->reset_requests();
  EXPECT_EQ(engine_->num_request_states(), 0u);
  EXPECT_EQ(first_token(21), t0);
  EXPECT_NE(stale, std::vector<int32_t>(8, t0)) << "the RNG never advanced; the check above proves nothing";
}

TEST_F(ExecuteTest, SameSeedSameTokensDifferentSeedDiffers) {
  auto run = [&](uint64_t id, uint64_t seed) {
    std::vector<int32_t> out;
    std::vector<int32_t> all = {1, 2, 3};
    for (int step = 0; step < 12; ++step) {
      StepPlan p;
      SeqPlan s = step == 0 ? seq(id, all, 0, {0, 1, 2, 3}) : seq(id, {all.back()}, static_cast<int32_t>(all.size()) - 1, {0, 1, 2, 3});
      s.sampling.temperature = 1.5f;  // flat: many candidates
      s.sampling.seed = seed;
      s.sampling.logprobs = true;
      p.seqs.push_back(s);
      auto r = engine_->execute(p);
      TS_CHECK(r.ok()) << r.error().to_string();
      EXPECT_LE(r->results[0].logprob, 0.0f);
      all.push_back(r->results[0].token);
      out.push_back(r->results[0].token);
    }
    StepPlan rel;
    rel.released = {id};
    TS_CHECK(engine_->execute(rel).ok());
    return out;
  };
  const auto a = run(21, 1234), b = run(22, 1234), c = run(23, 99);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(EngineCreate, UnsupportedModelsGiveErrorsNotCrashes) {
  // Q4_0 weights were refused ("not implemented yet: matmul with q4_0") until every ggml block
  // format got a matmul; now every DType computes (quant_engine_test.cpp checks the results).
  SynthSpec q4;
  q4.dtype = DType::kQ4_0;
  const SynthModel m4(q4);
  auto e = Engine::create(m4, {.pool = {.num_pages = 4, .page_size = 16}, .threads = 1, .isa = std::nullopt});
  ASSERT_TRUE(e.ok()) << e.error().to_string();

  const SynthModel ok_model(SynthSpec{});
  auto bad_pool = Engine::create(ok_model, {.pool = {.num_pages = 0, .page_size = 16}, .threads = 1, .isa = std::nullopt});
  ASSERT_FALSE(bad_pool.ok());
  EXPECT_NE(bad_pool.error().message.find("num_pages"), std::string::npos);
  auto bad_threads = Engine::create(ok_model, {.pool = {.num_pages = 4, .page_size = 16}, .threads = -3, .isa = std::nullopt});
  ASSERT_FALSE(bad_threads.ok());
  EXPECT_NE(bad_threads.error().message.find("threads"), std::string::npos);
}

}  // namespace
}  // namespace tessera::worker

namespace tessera::worker {
namespace {

// Sequences sampled together in one step (sampling runs in parallel over the engine's threads,
// each row penalized in place) give exactly the tokens and log-probabilities each gives alone.
TEST(ExecuteBatchSampling, BatchedEqualsOneAtATime) {
  SynthModel model{SynthSpec{}};
  constexpr int kSeqs = 5, kSteps = 6;
  auto make_engine = [&] {
    auto e = Engine::create(model, {.pool = {.num_pages = 2 * kSeqs, .page_size = kPageSize}, .threads = 3, .isa = std::nullopt});
    TS_CHECK(e.ok()) << e.error().to_string();
    return std::move(*e);
  };
  auto sampling = [](int i) {
    SamplingParams p;
    p.temperature = 0.7f + 0.2f * static_cast<float>(i);
    p.seed = 1000 + static_cast<uint64_t>(i);
    if (i == 1) p.repetition_penalty = 1.3f;
    if (i == 2) p.top_k = 5;
    if (i == 3) p.top_logprobs = 3;
    return p;
  };
  // Tokens (and log-probabilities) of sequence i after each step; batched or alone.
  auto run = [&](bool batched) {
    std::vector<std::vector<std::pair<int32_t, float>>> out(kSeqs);
    std::vector<std::vector<int32_t>> toks(kSeqs, std::vector<int32_t>{1, 2});
    auto engine = make_engine();
    for (int step = 0; step < kSteps; ++step) {
      StepPlan plan;
      for (int i = 0; i < kSeqs; ++i) {
        const auto& t = toks[static_cast<size_t>(i)];
        const int32_t start = step == 0 ? 0 : static_cast<int32_t>(t.size()) - 1;
        std::vector<int32_t> in(t.begin() + start, t.end());
        SeqPlan s = seq(static_cast<uint64_t>(100 + i), in, start, {2 * i, 2 * i + 1});
        s.sampling = sampling(i);
        if (batched) {
          plan.seqs.push_back(s);
        } else {
          StepPlan one;
          one.seqs.push_back(s);
          auto r = engine->execute(one);
          TS_CHECK(r.ok()) << r.error().to_string();
          out[static_cast<size_t>(i)].emplace_back(r->results.at(0).token, r->results.at(0).logprob);
          toks[static_cast<size_t>(i)].push_back(r->results.at(0).token);
        }
      }
      if (batched) {
        auto r = engine->execute(plan);
        TS_CHECK(r.ok()) << r.error().to_string();
        TS_CHECK_EQ(r->results.size(), static_cast<size_t>(kSeqs));
        for (int i = 0; i < kSeqs; ++i) {
          const auto& res = r->results[static_cast<size_t>(i)];
          TS_CHECK_EQ(res.request_id, static_cast<uint64_t>(100 + i));
          out[static_cast<size_t>(i)].emplace_back(res.token, res.logprob);
          toks[static_cast<size_t>(i)].push_back(res.token);
        }
      }
    }
    return out;
  };
  const auto alone = run(false);
  const auto together = run(true);
  for (int i = 0; i < kSeqs; ++i) {
    ASSERT_EQ(alone[static_cast<size_t>(i)].size(), together[static_cast<size_t>(i)].size());
    for (size_t s = 0; s < alone[static_cast<size_t>(i)].size(); ++s) {
      EXPECT_EQ(alone[static_cast<size_t>(i)][s].first, together[static_cast<size_t>(i)][s].first) << "seq " << i << " step " << s;
      // Logits of a row do not depend on the batch beyond float rounding of the shared GEMM
      // tiles; the log-probabilities agree to that rounding.
      EXPECT_NEAR(alone[static_cast<size_t>(i)][s].second, together[static_cast<size_t>(i)][s].second, 1e-4)
          << "seq " << i << " step " << s;
    }
  }
}

}  // namespace
}  // namespace tessera::worker
