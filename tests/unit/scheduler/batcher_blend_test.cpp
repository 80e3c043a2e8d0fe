// CacheBlend in the Batcher (docs/kv.md "CacheBlend"): a prompt with documents longer than a
// step's token budget is blended over several steps — every chunk that reaches a document carries
// the documents from the first to the last it reaches (whole: blend_tail completes one the chunk
// cuts), its head, ratio and salt; a chunk reaching none is an ordinary prefill; only the last
// samples; only pages up to the end of the first document are indexed. A request that cannot
// blend (prompt log-probabilities) is prefilled as usual, counted and logged once. blend_steps counts
// exactly the blended chunks the plans carry, preemptions included.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "tessera/scheduler/batcher.h"

namespace tessera::scheduler {
namespace {

constexpr int32_t kPs = 4;
constexpr int32_t kReused = 15;

// 32 tokens: anchor [0, 2), documents [2, 9), [9, 17), [17, 25), question [25, 32).
Request request(uint64_t id, bool documents = true, int32_t prompt_logprobs = -1) {
  Request r;
  r.id = id;
  r.prompt.resize(32);
  std::iota(r.prompt.begin(), r.prompt.end(), 100);
  r.ns.model_fingerprint = "test-model";
  r.max_tokens = 2;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  r.sampling.prompt_logprobs = prompt_logprobs;
  if (documents) r.blend_chunks = {{2, 7}, {9, 8}, {17, 8}};
  r.recompute_ratio = 0.25f;
  return r;
}

StepResult answer(const StepPlan& plan) {
  StepResult r;
  r.step_id = plan.step_id;
  for (const SeqPlan& s : plan.seqs) {
    if (s.sample) {  // a blended prompt reports its reused tokens (kReused) with its sample, as the worker does
      r.results.push_back({.request_id = s.request_id, .token = 7, .logprob = -0.5f, .top = {}});
      r.results.back().reused_tokens = s.blend_chunks.empty() ? 0 : kReused;
    }
    if (!s.prompt_logprobs) continue;
    PromptLogprobs pl{.request_id = s.request_id, .first_pos = s.start_pos + 1, .logprobs = {}, .top = {}};
    const size_t rows = s.tokens.size() - (s.next_token >= 0 ? 0 : 1);
    for (size_t i = 0; i < rows; ++i) {
      pl.logprobs.push_back(-0.1f);
      pl.top.push_back({});
    }
    r.prompt_logprobs.push_back(std::move(pl));
  }
  return r;
}

std::vector<SeqPlan> drive(Batcher& b, int max_steps = 40) {
  std::vector<SeqPlan> seen;
  for (int i = 0; i < max_steps && b.has_work(); ++i) {
    auto plan = b.step();
    EXPECT_TRUE(plan.ok()) << plan.error().to_string();
    if (!plan.ok()) break;
    seen.insert(seen.end(), plan->seqs.begin(), plan->seqs.end());
    auto out = b.apply(answer(*plan));
    EXPECT_TRUE(out.ok()) << out.error().to_string();
    EXPECT_TRUE(b.check().ok()) << b.check().error().to_string();
  }
  return seen;
}

std::unique_ptr<Batcher> make(int32_t budget, bool blend_steps = true, int32_t num_pages = 64) {
  return Batcher::create(BatcherConfig{.page_size = kPs, .num_pages = num_pages, .max_context = 64, .max_step_tokens = budget,
                                       .max_prefill_chunk = 4, .max_running = 4, .blend_steps = blend_steps})
      .value();
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, int32_t from, int32_t to) {
  return std::vector<int32_t>(v.begin() + from, v.begin() + to);
}

TEST(BatcherBlend, APromptLongerThanTheBudgetIsBlendedOverSeveralSteps) {
  auto b = make(12);
  const Request r = request(1);
  ASSERT_TRUE(b->submit(r).ok());
  const std::vector<SeqPlan> seen = drive(*b);
  ASSERT_GE(seen.size(), 4u);  // 3 prefill chunks of at most 12 tokens, then a decode
  struct Want {
    int32_t start, count;
    size_t chunks;
    int32_t tail_end;   // 0: no tail
    int32_t head_from;  // the head: the anchor [0, 2), then [head_from, start); 0: all of [0, start)
  };
  // [0, 12) cuts the 2nd document (tail to 17); [12, 24) continues it (head from 9), reaches the
  // 3rd and cuts it (tail to 25); [24, 32) continues that one (head from 17) and ends in the
  // question: every document, no tail, samples.
  const Want want[] = {{0, 12, 2, 17, 0}, {12, 12, 3, 25, 9}, {24, 8, 3, 0, 17}};
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const SeqPlan& s = seen[i];
    ASSERT_EQ(s.start_pos, want[i].start);
    ASSERT_EQ(static_cast<int32_t>(s.tokens.size()), want[i].count);
    ASSERT_EQ(s.blend_chunks.size(), want[i].chunks);
    for (size_t c = 0; c < s.blend_chunks.size(); ++c) {
      EXPECT_EQ(s.blend_chunks[c].begin, r.blend_chunks[c].begin);
      EXPECT_EQ(s.blend_chunks[c].length, r.blend_chunks[c].length);
    }
    const int32_t end = want[i].start + want[i].count;
    EXPECT_EQ(s.blend_tail, want[i].tail_end > 0 ? slice(r.prompt, end, want[i].tail_end) : std::vector<int32_t>{});
    // Only what the step's lookups read (the anchor and the document it continues), not the
    // whole head again on every step.
    std::vector<int32_t> head = slice(r.prompt, 0, want[i].head_from == 0 ? want[i].start : 2);
    if (want[i].head_from > 0) {
      const std::vector<int32_t> rest = slice(r.prompt, want[i].head_from, want[i].start);
      head.insert(head.end(), rest.begin(), rest.end());
    }
    EXPECT_EQ(s.blend_head, head);
    EXPECT_EQ(s.blend_head_from, want[i].head_from);
    EXPECT_FLOAT_EQ(s.blend_ratio, 0.25f);
    EXPECT_EQ(s.sample, i == 2);
  }
  EXPECT_TRUE(seen[3].blend_chunks.empty()) << "the decode is not blended";
  EXPECT_EQ(b->stats().blend_steps, 3);
  EXPECT_EQ(b->stats().blend_fallbacks, 0);
  // Only the pages before the end of the first document (exact K/V) are indexed: the same prompt
  // without documents reuses 8 positions (2 pages of 4), not the fused ones after them.
  ASSERT_TRUE(b->submit(request(2, false)).ok());
  drive(*b);
  EXPECT_EQ(b->stats().cached_prompt_tokens, 8);
}

TEST(BatcherBlend, AChunkReachingNoDocumentIsAnOrdinaryPrefill) {
  auto b = make(26);  // [0, 26) reaches every document; [26, 32) is the rest of the question
  ASSERT_TRUE(b->submit(request(1)).ok());
  const std::vector<SeqPlan> seen = drive(*b);
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen[0].blend_chunks.size(), 3u);
  EXPECT_TRUE(seen[0].blend_tail.empty());
  EXPECT_FALSE(seen[0].sample);
  EXPECT_EQ(seen[1].start_pos, 26);
  EXPECT_TRUE(seen[1].blend_chunks.empty());
  EXPECT_TRUE(seen[1].sample);
  EXPECT_EQ(b->stats().blend_steps, 1);
}

// A worker without the capability blend_steps (built before blends over several steps) refuses a
// blended chunk that does not sample: a prompt that fits the step is blended in one step with the
// whole head; one that does not is prefilled as usual, counted once as a fallback.
TEST(BatcherBlend, AWorkerWithoutBlendStepsGetsOneStepBlendsOrPlainPrefills) {
  {
    auto b = make(12, /*blend_steps=*/false);
    ASSERT_TRUE(b->submit(request(1)).ok());
    const std::vector<SeqPlan> seen = drive(*b);
    ASSERT_GE(seen.size(), 4u);
    for (const SeqPlan& s : seen) EXPECT_TRUE(s.blend_chunks.empty()) << "step at " << s.start_pos;
    EXPECT_EQ(b->stats().blend_steps, 0);
    EXPECT_EQ(b->stats().blend_fallbacks, 1);
  }
  {
    auto b = make(40, /*blend_steps=*/false);
    const Request r = request(1);
    ASSERT_TRUE(b->submit(r).ok());
    const std::vector<SeqPlan> seen = drive(*b);
    ASSERT_GE(seen.size(), 2u);
    EXPECT_EQ(seen[0].start_pos, 0);
    EXPECT_EQ(seen[0].tokens.size(), 32u);
    EXPECT_EQ(seen[0].blend_chunks.size(), 3u);
    EXPECT_TRUE(seen[0].sample);
    EXPECT_TRUE(seen[0].blend_tail.empty());
    EXPECT_EQ(seen[0].blend_head_from, 0);
    EXPECT_EQ(b->stats().blend_steps, 1);
    EXPECT_EQ(b->stats().blend_fallbacks, 0);
  }
}

// A preempted sequence blends its prompt again when it resumes and the worker reports the reused
// tokens again with that sample: usage counts them once.
TEST(BatcherBlend, ReusedTokensAreCountedOnceAcrossAPreemption) {
  // 18 pages of 4. Request 1 is blended in one step, request 2 (other tokens, same documents'
  // layout) in two (8 tokens, then 24); both decode until request 1's growth finds no free page
  // and preempts request 2 (the later arrival), which resumes when request 1 is done.
  auto b = make(40, true, /*num_pages=*/18);
  Request first = request(1), second = request(2);
  first.max_tokens = second.max_tokens = 9;
  std::iota(second.prompt.begin(), second.prompt.end(), 200);
  ASSERT_TRUE(b->submit(first).ok());
  ASSERT_TRUE(b->submit(second).ok());
  std::vector<FinishEvent> finished;
  for (int i = 0; i < 60 && b->has_work(); ++i) {
    auto plan = b->step();
    ASSERT_TRUE(plan.ok()) << plan.error().to_string();
    auto out = b->apply(answer(*plan));
    ASSERT_TRUE(out.ok()) << out.error().to_string();
    ASSERT_TRUE(b->check().ok()) << b->check().error().to_string();
    finished.insert(finished.end(), out->finished.begin(), out->finished.end());
  }
  EXPECT_EQ(b->stats().preemptions, 1);
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_EQ(b->stats().blend_steps, 4) << "request 1 once, request 2 in two steps and once more after its preemption";
  for (const FinishEvent& f : finished) {
    SCOPED_TRACE(f.request_id);
    EXPECT_EQ(f.reason, FinishReason::kLength);
    EXPECT_EQ(f.usage.reused_prompt_tokens, kReused) << "reported with each prefill's sample, counted once";
    EXPECT_EQ(f.usage.preemptions, f.request_id == 2 ? 1 : 0);
  }
}

// blend_steps counts the blended chunks sent in plans, exactly, also when blending sequences are
// preempted: seeded runs of requests with documents at mixed priorities on a pool too small for
// all of them, every plan's blended SeqPlans counted against the statistic after every step.
TEST(BatcherBlend, BlendStepsCountExactlyTheBlendsSentThroughPreemptions) {
  int64_t preemptions = 0, preempted_blenders = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    auto b = make(12, true, /*num_pages=*/20);
    std::vector<Request> reqs;
    for (uint64_t id = 1; id <= 5; ++id) {
      Request r = request(id, /*documents=*/rng() % 4 != 0);
      std::iota(r.prompt.begin(), r.prompt.end(), static_cast<int32_t>(100 * id));
      r.priority = static_cast<int32_t>(rng() % 3);
      r.max_tokens = 4 + static_cast<int32_t>(rng() % 12);
      reqs.push_back(r);
    }
    int64_t sent = 0;
    size_t next = 0, finished = 0;
    for (int i = 0; i < 400 && finished < reqs.size(); ++i) {
      if (next < reqs.size() && i % 3 == 0) {  // arrivals spread over steps
        ASSERT_TRUE(b->submit(reqs[next++]).ok());
      }
      if (!b->has_work()) continue;
      auto plan = b->step();
      ASSERT_TRUE(plan.ok()) << plan.error().to_string();
      for (const SeqPlan& s : plan->seqs) {
        if (s.blend_chunks.empty()) continue;
        ++sent;
      }
      EXPECT_EQ(b->stats().blend_steps, sent) << "after step " << i;
      auto out = b->apply(answer(*plan));
      ASSERT_TRUE(out.ok()) << out.error().to_string();
      ASSERT_TRUE(b->check().ok()) << b->check().error().to_string();
      finished += out->finished.size();
      for (const FinishEvent& f : out->finished) {
        if (!reqs[f.request_id - 1].blend_chunks.empty() && f.usage.preemptions > 0) ++preempted_blenders;
      }
    }
    EXPECT_EQ(finished, reqs.size()) << "not every request finished";
    preemptions += b->stats().preemptions;
  }
  EXPECT_GT(preemptions, 0) << "no run preempted anything: the scenario tests nothing";
  EXPECT_GT(preempted_blenders, 0) << "no request with documents was preempted";
}

TEST(BatcherBlend, PromptLogprobsFallBackToAnOrdinaryPrefillCountedOnce) {
  auto b = make(12);
  ASSERT_TRUE(b->submit(request(1, true, 0)).ok());
  const std::vector<SeqPlan> seen = drive(*b);
  ASSERT_FALSE(seen.empty());
  for (const SeqPlan& s : seen) EXPECT_TRUE(s.blend_chunks.empty()) << "step at " << s.start_pos;
  EXPECT_EQ(b->stats().blend_steps, 0);
  EXPECT_EQ(b->stats().blend_fallbacks, 1);
}

}  // namespace
}  // namespace tessera::scheduler
