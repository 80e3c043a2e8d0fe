// The sim backend (tessera/worker/sim_backend.h): its cost model against the figures it was
// fitted to, and its answers — deterministic tokens that depend on the prompt *through the
// pages* — run through the real StepExecutor.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "synth_model.h"
#include "tessera/worker/sim_backend.h"
#include "tessera/worker/step_executor.h"

namespace tessera::worker {
namespace {

using testing::SynthModel;
using testing::SynthSpec;

constexpr int32_t kPageSize = 4;
constexpr int32_t kVocab = 97;
constexpr int32_t kEos = 50;

std::vector<int32_t> ints(int32_t first, int32_t n) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

// Static batching as TensorRT-LLM 0.5 measured it: one prefill step of B prompts of I tokens,
// then O - 1 decode steps; output tokens per simulated second.
double static_batch_throughput(const SimCost& c, int B, int I, int O) {
  std::vector<int32_t> prompt(static_cast<size_t>(I), 5), one{5};
  std::vector<SeqInput> batch(static_cast<size_t>(B));
  for (auto& s : batch) s = SeqInput{.tokens = prompt, .start_pos = 0};
  double t = c.seconds(batch);
  for (int j = 1; j < O; ++j) {
    for (auto& s : batch) s = SeqInput{.tokens = one, .start_pos = I + j - 1};
    t += c.seconds(batch);
  }
  return B * O / t;
}

TEST(SimCost, AddsItsTerms) {
  const SimCost c{
      .step_us = 100, .prefill_token_us = 10, .decode_seq_us = 5, .kv_token_us = 0.5, .prefill_pair_us = 0.25};
  const std::vector<int32_t> chunk{1, 2, 3, 4}, one{7};
  const std::vector<SeqInput> batch{{.tokens = chunk, .start_pos = 8}, {.tokens = one, .start_pos = 10},
                                    {.tokens = one, .start_pos = 20}};
  // 100 + 10 * 4 + 5 * 2 + 0.5 * (12 + 11 + 21) + 0.25 * (4 * 8 + 4 * 5 / 2) = 182.5 us
  EXPECT_NEAR(c.seconds(batch), 182.5e-6, 1e-12);
  EXPECT_EQ(c.seconds({}), 0.0);
}

TEST(SimCost, H100ProfileReproducesThePublishedFigures) {
  // TensorRT-LLM 0.5.0 docs/source/performance.md, H100 FP8, LLaMA 7B, out tok/s.
  const SimCost c = sim_profile("h100-llama2-7b").value();
  EXPECT_NEAR(static_batch_throughput(c, 64, 128, 128), 9193, 9193 * 0.01);
  EXPECT_NEAR(static_batch_throughput(c, 64, 128, 2048), 5367, 5367 * 0.01);
  EXPECT_NEAR(static_batch_throughput(c, 64, 2048, 128), 2058, 2058 * 0.01);
  EXPECT_NEAR(static_batch_throughput(c, 32, 2048, 2048), 2230, 2230 * 0.01);
}

TEST(SimCost, CpuProfileReproducesEngineBench) {
  // engine_bench on stories260K, 1 thread, tokens per CPU-second (docs/simulation.md).
  const SimCost c = sim_profile("cpu-stories260k").value();
  auto decode_step_us = [&c](int B, int ctx) {
    std::vector<int32_t> one{5};
    std::vector<SeqInput> batch(static_cast<size_t>(B), SeqInput{.tokens = one, .start_pos = ctx - 1});
    return c.seconds(batch) * 1e6;
  };
  auto prefill_us = [&c](int n) {
    std::vector<int32_t> p(static_cast<size_t>(n), 5);
    const std::vector<SeqInput> batch{{.tokens = p, .start_pos = 0}};
    return c.seconds(batch) * 1e6;
  };
  const struct {
    double model, measured;
  } points[] = {{decode_step_us(1, 64), 1e6 / 13865},  {decode_step_us(1, 416), 1e6 / 3525},
                {decode_step_us(32, 64), 32e6 / 16467}, {decode_step_us(32, 416), 32e6 / 3016},
                {prefill_us(64), 64e6 / 29339},         {prefill_us(128), 128e6 / 19363},
                {prefill_us(256), 256e6 / 11653},       {prefill_us(512), 512e6 / 6627}};
  for (const auto& p : points) EXPECT_NEAR(p.model / p.measured, 1.0, 0.11) << p.model << " us vs " << p.measured;
}

TEST(SimCost, ParsesAndRefuses) {
  const SimCost c = parse_sim_cost("4487,13.16,7.65,0.0936").value();
  EXPECT_EQ(c.step_us, 4487);
  EXPECT_EQ(c.kv_token_us, 0.0936);
  EXPECT_EQ(c.prefill_pair_us, 0.0);
  EXPECT_EQ(parse_sim_cost("1,2,3,4,5").value().prefill_pair_us, 5.0);
  for (const char* bad : {"", "1,2,3", "1,2,3,4,5,6", "1,2,x,4", "1,2,-3,4", "1,,3,4"}) {
    auto r = parse_sim_cost(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("--sim-cost"), std::string::npos) << r.error().message;
  }
  EXPECT_FALSE(sim_profile("a100").ok());
}

TEST(SimTokens, NeverEosAndInRange) {
  for (uint64_t s = 0; s < 20000; ++s) {
    const int32_t t = sim_token(s * 0x9e3779b97f4a7c15ULL, kVocab, kEos);
    ASSERT_GE(t, 3);
    ASSERT_LT(t, kVocab);
    ASSERT_NE(t, kEos);
  }
  EXPECT_NE(sim_fingerprint(1), 1u);
  // Deterministic, and sensitive to every prompt token and its position.
  const std::vector<int32_t> p = ints(10, 12);
  EXPECT_EQ(sim_expected_tokens(p, 8, kVocab, kEos), sim_expected_tokens(p, 8, kVocab, kEos));
  std::vector<int32_t> q = p;
  q[0] = 11;
  EXPECT_NE(sim_expected_tokens(p, 8, kVocab, kEos), sim_expected_tokens(q, 8, kVocab, kEos));
}

SeqPlan seq(uint64_t id, std::vector<int32_t> tokens, int32_t start, std::vector<int32_t> table,
            float temperature = 0) {
  SeqPlan s;
  s.request_id = id;
  s.tokens = std::move(tokens);
  s.start_pos = start;
  s.block_table = std::move(table);
  for (int32_t i = 0; i < static_cast<int32_t>(s.tokens.size()); ++i) {
    const int32_t p = start + i;
    s.slot_mapping.push_back(int64_t{s.block_table[static_cast<size_t>(p / kPageSize)]} * kPageSize + p % kPageSize);
  }
  s.sample = true;
  s.sampling.temperature = temperature;
  s.sampling.seed = 7;
  return s;
}

class SimBackendTest : public ::testing::Test {
 protected:
  SimBackendTest()
      : model_(SynthSpec{.vocab_size = kVocab}),
        backend_(SimBackend::create(model_, {.pool = {.num_pages = 16, .page_size = kPageSize},
                                             .cost = {}, .time_scale = 1.0, .eos = kEos})
                     .value()),
        exec_(*backend_) {}

  // Runs one plan and returns its sampled tokens.
  std::vector<int32_t> step(std::vector<SeqPlan> seqs, std::vector<PageCopy> copies = {}) {
    StepPlan plan;
    plan.step_id = ++step_id_;
    plan.seqs = std::move(seqs);
    plan.copies = std::move(copies);
    auto r = exec_.execute(plan);
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    std::vector<int32_t> out;
    if (r.ok()) {
      for (const SeqResult& s : r->results) out.push_back(s.token);
    }
    return out;
  }

  SynthModel model_;
  std::unique_ptr<SimBackend> backend_;
  StepExecutor exec_;
  uint64_t step_id_ = 0;
};

TEST_F(SimBackendTest, AnswersAreTheChainedTokensThroughThePages) {
  const std::vector<int32_t> prompt = ints(20, 10);
  const std::vector<int32_t> want = sim_expected_tokens(prompt, 4, kVocab, kEos);
  // Chunked prefill over scattered pages (6 then 4 tokens), then three greedy decodes.
  std::vector<int32_t> table{5, 2, 7};
  SeqPlan first = seq(1, {prompt.begin(), prompt.begin() + 6}, 0, table);
  first.sample = false;
  EXPECT_TRUE(step({first}).empty());
  std::vector<int32_t> got = step({seq(1, {prompt.begin() + 6, prompt.end()}, 6, table)});
  ASSERT_EQ(got.size(), 1u);
  for (int i = 0; i < 3; ++i) {
    const int32_t pos = 10 + i;
    if (pos / kPageSize >= static_cast<int32_t>(table.size())) table.push_back(9);
    got.push_back(step({seq(1, {got.back()}, pos, table)}).at(0));
  }
  EXPECT_EQ(got, want);

  // A second request shares the first 8 positions (pages 5 and 2) and has its own suffix in
  // page 11; temperature 1 picks the same tokens as greedy.
  std::vector<int32_t> prompt2(prompt.begin(), prompt.begin() + 8);
  prompt2.insert(prompt2.end(), {60, 61, 62});
  const std::vector<int32_t> got2 = step({seq(2, {60, 61, 62}, 8, {5, 2, 11}, 1.0f)});
  EXPECT_EQ(got2, sim_expected_tokens(prompt2, 1, kVocab, kEos));

  // Copy-on-write: page 7 copied to page 12 continues request 1 exactly.
  const std::vector<int32_t> via_copy = step({seq(3, {want[0]}, 10, {5, 2, 12})}, {{.src = 7, .dst = 12}});
  EXPECT_EQ(via_copy, std::vector<int32_t>{want[1]});

  // A wrong page in the block table reads someone else's state: a different answer.
  const std::vector<int32_t> wrong = step({seq(4, {want[0]}, 10, {5, 11, 7})});
  EXPECT_NE(wrong, std::vector<int32_t>{want[1]});
}

TEST_F(SimBackendTest, BatchedAndSeparateStepsAgree) {
  const std::vector<int32_t> a = ints(30, 5), b = ints(40, 7);
  const std::vector<int32_t> together = step({seq(1, a, 0, {0, 1}), seq(2, b, 0, {2, 3})});
  EXPECT_EQ(together, (std::vector<int32_t>{sim_expected_tokens(a, 1, kVocab, kEos)[0],
                                            sim_expected_tokens(b, 1, kVocab, kEos)[0]}));
}

TEST(SimBackendTime, StepsTakeTheirSimulatedTimeOverTheScale) {
  SynthModel model(SynthSpec{.vocab_size = kVocab});
  for (double scale : {1.0, 4.0}) {
    auto backend = SimBackend::create(model, {.pool = {.num_pages = 4, .page_size = kPageSize},
                                              .cost = {.step_us = 40000}, .time_scale = scale, .eos = kEos})
                       .value();
    const std::vector<int32_t> tokens{3, 4, 5};
    const std::vector<int32_t> table{1};
    const std::vector<int64_t> slots{4, 5, 6};
    const std::vector<SeqInput> batch{
        {.tokens = tokens, .start_pos = 0, .block_table = table, .slot_mapping = slots, .want_logits = true}};
    const auto t0 = std::chrono::steady_clock::now();
    auto r = backend->forward_argmax(batch);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(r.ok());
    EXPECT_GE(wall, 0.040 / scale) << "scale " << scale;
    EXPECT_NEAR(backend->simulated_seconds(), 0.040, 1e-12);
    EXPECT_EQ(backend->forwards(), 1);
  }
  EXPECT_FALSE(SimBackend::create(model, {.pool = {.num_pages = 4, .page_size = 4}, .time_scale = 0}).ok());
}

}  // namespace
}  // namespace tessera::worker
