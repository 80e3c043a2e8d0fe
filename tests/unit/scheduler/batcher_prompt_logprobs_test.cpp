// Prompt log-probabilities in the Batcher (SamplingParams::prompt_logprobs): scored chunks,
// next_token, the prefix cache not reused where logits are still needed, and one
// PromptLogprobsEvent with every position in order, before the first token — also across a
// preemption. The worker's answers are written by hand: the logprob of position p is -p / 100.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "tessera/scheduler/batcher.h"

namespace tessera::scheduler {
namespace {

constexpr int32_t kPs = 4;

Request request(uint64_t id, int32_t prompt_logprobs, int32_t max_tokens = 2) {
  Request r;
  r.id = id;
  r.prompt.resize(10);
  std::iota(r.prompt.begin(), r.prompt.end(), 10);  // 10 tokens: chunks of 4, 4, 2
  r.ns.model_fingerprint = "test-model";
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  r.sampling.prompt_logprobs = prompt_logprobs;
  return r;
}

// What a worker answers: token 7 for every sampled sequence; for every scored chunk, position
// start + 1 + i gets -(start + 1 + i) / 100 (one per row with a known next token).
StepResult answer(const StepPlan& plan, std::vector<SeqPlan>* seen = nullptr) {
  StepResult r;
  r.step_id = plan.step_id;
  for (const SeqPlan& s : plan.seqs) {
    if (seen != nullptr) seen->push_back(s);
    if (s.sample) r.results.push_back({.request_id = s.request_id, .token = 7, .logprob = -0.5f, .top = {}});
    if (!s.prompt_logprobs) continue;
    PromptLogprobs pl{.request_id = s.request_id, .first_pos = s.start_pos + 1, .logprobs = {}, .top = {}};
    const size_t rows = s.tokens.size() - (s.next_token >= 0 ? 0 : 1);
    for (size_t i = 0; i < rows; ++i) {
      const int32_t pos = pl.first_pos + static_cast<int32_t>(i);
      pl.logprobs.push_back(-static_cast<float>(pos) / 100.0f);
      pl.top.push_back({{.token = 1, .logprob = -0.1f}});
    }
    r.prompt_logprobs.push_back(std::move(pl));
  }
  return r;
}

struct Collected {
  std::vector<SeqPlan> seqs;
  std::vector<PromptLogprobsEvent> prompt;
  std::vector<std::string> order;  // "prompt <id>" / "token <id>" as the outcomes list them
};

void drive(Batcher& b, Collected& run, int max_steps = 50) {
  for (int i = 0; i < max_steps && b.has_work(); ++i) {
    auto plan = b.step();
    ASSERT_TRUE(plan.ok()) << plan.error().to_string();
    auto out = b.apply(answer(*plan, &run.seqs));
    ASSERT_TRUE(out.ok()) << out.error().to_string();
    for (auto& p : out->prompt_logprobs) {
      run.order.push_back("prompt " + std::to_string(p.request_id));
      run.prompt.push_back(std::move(p));
    }
    for (const auto& t : out->tokens) run.order.push_back("token " + std::to_string(t.request_id));
    ASSERT_TRUE(b.check().ok()) << b.check().error().to_string();
  }
}

BatcherConfig config() {
  return BatcherConfig{.page_size = kPs, .num_pages = 32, .max_context = 64, .max_step_tokens = 16, .max_prefill_chunk = 4,
                       .max_running = 4};
}

void expect_positions_1_to_9(const PromptLogprobsEvent& e) {
  ASSERT_EQ(e.logprobs.size(), 9u);
  ASSERT_EQ(e.top.size(), 9u);
  for (size_t i = 0; i < 9; ++i) EXPECT_FLOAT_EQ(e.logprobs[i], -static_cast<float>(i + 1) / 100.0f) << "token " << i + 1;
}

TEST(BatcherPromptLogprobs, ChunksAreScoredInOrderAndReportedOnceBeforeTheFirstToken) {
  auto b = Batcher::create(config());
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->submit(request(1, 2)).ok());
  Collected run;
  drive(**b, run);
  // Chunks [0,4) [4,8) [8,10): the first two carry the next chunk's first token.
  std::vector<SeqPlan> scored;
  for (const SeqPlan& s : run.seqs)
    if (s.prompt_logprobs) scored.push_back(s);
  ASSERT_EQ(scored.size(), 3u);
  EXPECT_EQ(scored[0].start_pos, 0);
  EXPECT_EQ(scored[0].next_token, 14);
  EXPECT_EQ(scored[1].next_token, 18);
  EXPECT_EQ(scored[2].next_token, -1);
  EXPECT_TRUE(scored[2].sample);
  // Decode steps are not scored.
  EXPECT_EQ(run.seqs.back().tokens.size(), 1u);
  EXPECT_FALSE(run.seqs.back().prompt_logprobs);
  ASSERT_EQ(run.prompt.size(), 1u);
  expect_positions_1_to_9(run.prompt[0]);
  ASSERT_GE(run.order.size(), 2u);
  EXPECT_EQ(run.order[0], "prompt 1");
  EXPECT_EQ(run.order[1], "token 1");
}

TEST(BatcherPromptLogprobs, ACachedPrefixIsComputedAgainWhenItsLogitsAreNeeded) {
  auto b = Batcher::create(config());
  ASSERT_TRUE(b.ok());
  Collected warm;
  ASSERT_TRUE((*b)->submit(request(1, -1)).ok());
  drive(**b, warm);
  // The same prompt without prompt logprobs reuses the cached pages ...
  Collected plain;
  ASSERT_TRUE((*b)->submit(request(2, -1)).ok());
  drive(**b, plain);
  EXPECT_GT(plain.seqs.front().start_pos, 0);
  // ... with them it computes from position 0 and gets every position.
  Collected scored;
  ASSERT_TRUE((*b)->submit(request(3, 0)).ok());
  drive(**b, scored);
  EXPECT_EQ(scored.seqs.front().start_pos, 0);
  EXPECT_TRUE(scored.seqs.front().prompt_logprobs);
  ASSERT_EQ(scored.prompt.size(), 1u);
  expect_positions_1_to_9(scored.prompt[0]);
}

TEST(BatcherPromptLogprobs, APreemptedRequestKeepsWhatWasScored) {
  // One sequence scored through its first chunk, then preempted by a higher-priority request
  // that needs every page: on resuming it reuses the cached prefix up to the first position
  // still missing, and the event still has positions 1..9 exactly once.
  BatcherConfig c = config();
  c.num_pages = 4;  // 16 positions: the two requests cannot both hold their pages
  c.admission_headroom = 0;
  auto b = Batcher::create(c);
  ASSERT_TRUE(b.ok());
  Batcher& batcher = **b;
  ASSERT_TRUE(batcher.submit(request(1, 1, 4)).ok());
  Collected run;
  {
    auto plan = batcher.step();
    ASSERT_TRUE(plan.ok());
    auto out = batcher.apply(answer(*plan, &run.seqs));
    ASSERT_TRUE(out.ok());
  }
  Request urgent = request(2, -1, 4);
  urgent.prompt.assign(12, 3);
  urgent.priority = 10;
  ASSERT_TRUE(batcher.submit(urgent).ok());
  drive(batcher, run);
  std::vector<PromptLogprobsEvent> mine;
  for (auto& e : run.prompt)
    if (e.request_id == 1) mine.push_back(e);
  ASSERT_EQ(mine.size(), 1u);
  expect_positions_1_to_9(mine[0]);
  EXPECT_GT(batcher.stats().preemptions, 0) << "the scenario did not preempt";
}

}  // namespace
}  // namespace tessera::scheduler
