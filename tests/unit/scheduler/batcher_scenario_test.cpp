// Scenario tests of continuous batching: exact plans, chunked prefill, prefix sharing,
// copy-on-write, preemption and resume, cancellation, stops, priorities, preference fills and
// failures. Every step is audited by the Harness (page invariant, reference counts, radix
// invariants, private writes) and executed by the FakeWorker oracle (correct K/V everywhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "batcher_harness.h"

namespace tessera::scheduler {
namespace {

using tessera::testing::Harness;
using tessera::testing::iota_tokens;
using tessera::testing::make_request;
using tessera::testing::Scenario;

BatcherConfig small_config() {
  return BatcherConfig{.page_size = 4, .num_pages = 16, .max_context = 64, .max_step_tokens = 32, .max_running = 4};
}

class BatcherScenario : public ::testing::Test {
 protected:
  void TearDown() override {
    h.expect_invariants();
    // Nothing is held once nothing is live.
    if (!h.batcher->has_work()) {
      EXPECT_EQ(h.batcher->pages().num_held(), 0);
    }
  }
  Harness h{small_config()};
};

TEST_F(BatcherScenario, OneRequestGetsExactPlansFromPrefillToLength) {
  const auto prompt = iota_tokens(10, 10);
  StepPlan p1, p2, p3;
  Scenario("prefill then decode to max_tokens")
      .Given("one request of 10 prompt tokens and max_tokens 3", [&] { h.submit(make_request(1, prompt, 3)); })
      .When("the first step is planned", [&] { p1 = h.plan(); })
      .Then("it prefills the whole prompt into 3 fresh pages and samples", [&] {
        ASSERT_EQ(p1.seqs.size(), 1u);
        const SeqPlan& s = p1.seqs[0];
        EXPECT_EQ(s.request_id, 1u);
        EXPECT_EQ(s.tokens, prompt);
        EXPECT_EQ(s.start_pos, 0);
        EXPECT_EQ(s.block_table, (std::vector<int32_t>{0, 1, 2}));
        ASSERT_EQ(s.slot_mapping.size(), 10u);
        for (int32_t i = 0; i < 10; ++i) EXPECT_EQ(s.slot_mapping[static_cast<size_t>(i)], s.block_table[static_cast<size_t>(i / 4)] * 4 + i % 4);
        EXPECT_TRUE(s.sample);
        EXPECT_TRUE(p1.copies.empty());
        EXPECT_TRUE(p1.released.empty());
      })
      .When("it is applied", [&] { h.apply(p1); })
      .Then("the sampled token is emitted and the 2 full prompt pages are indexed", [&] {
        ASSERT_EQ(h.tokens.size(), 1u);
        EXPECT_EQ(h.tokens[0].token, h.worker.token_for(1, 10));
        EXPECT_EQ(h.tokens[0].index, 0);
        EXPECT_EQ(h.batcher->index().indexed_pages(), 2);
      })
      .When("two more steps run", [&] {
        p2 = h.step();
        p3 = h.step();
      })
      .Then("each decodes one token at the next position in the same pages", [&] {
        ASSERT_EQ(p2.seqs.size(), 1u);
        EXPECT_EQ(p2.seqs[0].tokens, (std::vector<int32_t>{h.tokens[0].token}));
        EXPECT_EQ(p2.seqs[0].start_pos, 10);
        EXPECT_EQ(p2.seqs[0].block_table, (std::vector<int32_t>{0, 1, 2}));
        EXPECT_EQ(p3.seqs[0].start_pos, 11);
      })
      .And("the request finishes by length with its usage, its full pages cached", [&] {
        ASSERT_EQ(h.finished.size(), 1u);
        EXPECT_EQ(h.finished[0].reason, FinishReason::kLength);
        EXPECT_EQ(h.finished[0].usage.prompt_tokens, 10);
        EXPECT_EQ(h.finished[0].usage.completion_tokens, 3);
        EXPECT_EQ(h.finished[0].usage.cached_prompt_tokens, 0);
        EXPECT_EQ(h.output_of(1), (std::vector<int32_t>{h.worker.token_for(1, 10), h.worker.token_for(1, 11), h.worker.token_for(1, 12)}));
        EXPECT_EQ(h.batcher->pages().num_held(), 0);
        EXPECT_EQ(h.batcher->pages().num_cached(), 3);  // positions 0..11 were computed
      })
      .And("the next plan tells the worker to drop the request", [&] {
        StepPlan p = h.step();
        EXPECT_EQ(p.released, (std::vector<uint64_t>{1}));
        EXPECT_TRUE(p.seqs.empty());
      });
}

TEST(BatcherChunking, ALongPromptIsChunkedAndNeverStallsRunningDecodes) {
  Harness h(BatcherConfig{.page_size = 4, .num_pages = 32, .max_context = 64, .max_step_tokens = 8, .max_running = 4});
  const auto long_prompt = iota_tokens(100, 30);
  Scenario("chunked prefill")
      .Given("request A decoding", [&] {
        h.submit(make_request(1, iota_tokens(10, 6), 20));
        h.step();
      })
      .When("B with a 30-token prompt arrives under an 8-token step budget", [&] { h.submit(make_request(2, long_prompt, 2)); })
      .Then("every step decodes A and gives B the remaining 7 tokens, in order", [&] {
        int32_t next = 0;
        for (int step = 0; next < 30; ++step) {
          ASSERT_LT(step, 10);
          StepPlan p = h.step();
          const SeqPlan* a = Harness::find(p, 1);
          const SeqPlan* b = Harness::find(p, 2);
          ASSERT_NE(a, nullptr);
          ASSERT_NE(b, nullptr);
          EXPECT_EQ(a->tokens.size(), 1u);
          EXPECT_EQ(b->start_pos, next);
          EXPECT_EQ(static_cast<int32_t>(b->tokens.size()), std::min(7, 30 - next));
          next += static_cast<int32_t>(b->tokens.size());
          EXPECT_EQ(b->sample, next == 30);
          if (step == 0) {
            // The completed full page of the first chunk is already shareable.
            EXPECT_EQ(h.batcher->index().peek(make_request(0, {}, 1).ns, long_prompt), 4);
          }
        }
      });
  h.run_until_idle(100);
  EXPECT_EQ(h.finished.size(), 2u);
}

TEST_F(BatcherScenario, ASharedPrefixIsMatchedAndNotRecomputed) {
  const auto a_prompt = iota_tokens(10, 12);
  auto b_prompt = iota_tokens(10, 8);
  b_prompt.insert(b_prompt.end(), {500, 501, 502, 503, 504});
  StepPlan a_first, b_first;
  Scenario("prefix sharing")
      .Given("A with a 12-token prompt has finished", [&] {
        h.submit(make_request(1, a_prompt, 2));
        a_first = h.step();
        h.run_until_idle(10);
      })
      .When("B sharing A's first 8 tokens arrives", [&] {
        h.submit(make_request(2, b_prompt, 2));
        b_first = h.step();
      })
      .Then("B computes only from position 8, on A's first two pages", [&] {
        ASSERT_EQ(b_first.seqs.size(), 1u);
        const SeqPlan& s = b_first.seqs[0];
        EXPECT_EQ(s.start_pos, 8);
        EXPECT_EQ(s.tokens, std::vector<int32_t>(b_prompt.begin() + 8, b_prompt.end()));
        EXPECT_EQ(std::vector<int32_t>(s.block_table.begin(), s.block_table.begin() + 2),
                  std::vector<int32_t>(a_first.seqs[0].block_table.begin(), a_first.seqs[0].block_table.begin() + 2));
      })
      .And("B's usage reports 8 cached prompt tokens", [&] {
        h.run_until_idle(10);
        ASSERT_NE(h.finish_of(2), nullptr);
        EXPECT_EQ(h.finish_of(2)->usage.cached_prompt_tokens, 8);
        EXPECT_EQ(h.batcher->stats().cached_prompt_tokens, 8);
        EXPECT_EQ(h.batcher->stats().prompt_tokens, 25);
      });
}

TEST(BatcherSharing, APrefillChunkIsSharedAsSoonAsItCompletes) {
  Harness h(BatcherConfig{.page_size = 4, .num_pages = 32, .max_context = 64, .max_step_tokens = 20, .max_prefill_chunk = 9, .max_running = 4});
  const auto prompt = iota_tokens(10, 30);
  StepPlan a_first, b_first;
  Scenario("insert per completed prefill chunk")
      .Given("A's 30-token prompt has had its first 9-token chunk computed", [&] {
        h.submit(make_request(1, prompt, 2));
        a_first = h.step();
        EXPECT_EQ(a_first.seqs.at(0).tokens.size(), 9u);
      })
      .When("B with the same prompt arrives while A is still prefilling", [&] {
        h.submit(make_request(2, prompt, 2));
        b_first = h.step();
      })
      .Then("B starts after A's two completed pages and reads them, in the same step as A's next chunk", [&] {
        ASSERT_NE(Harness::find(b_first, 1), nullptr);
        EXPECT_EQ(Harness::find(b_first, 1)->start_pos, 9);
        const SeqPlan* b = Harness::find(b_first, 2);
        ASSERT_NE(b, nullptr);
        EXPECT_EQ(b->start_pos, 8);
        EXPECT_EQ(std::vector<int32_t>(b->block_table.begin(), b->block_table.begin() + 2),
                  std::vector<int32_t>(a_first.seqs[0].block_table.begin(), a_first.seqs[0].block_table.begin() + 2));
        h.run_until_idle(30);
        EXPECT_EQ(h.finish_of(2)->usage.cached_prompt_tokens, 8);
      });
}

TEST(BatcherSharing, IdenticalPrefixesComputedTogetherAreDeduplicated) {
  Harness h(BatcherConfig{.page_size = 4, .num_pages = 32, .max_context = 64, .max_step_tokens = 64, .max_running = 4});
  const auto prompt = iota_tokens(10, 20);  // 5 full pages
  StepPlan first, second;
  Scenario("deduplication on insert")
      .Given("A and B with the same prompt are admitted in the same step", [&] {
        h.submit(make_request(1, prompt, 4));
        h.submit(make_request(2, prompt, 4));
        first = h.plan();
        ASSERT_EQ(first.seqs.size(), 2u);
        EXPECT_NE(first.seqs[0].block_table, first.seqs[1].block_table);  // nothing to share yet
        EXPECT_EQ(h.batcher->pages().num_held(), 10);
      })
      .When("their prefills complete", [&] { h.apply(first); })
      .Then("B switches to A's indexed pages and its duplicates are freed", [&] {
        EXPECT_EQ(h.batcher->pages().num_held(), 5);
        second = h.step();
        ASSERT_EQ(second.seqs.size(), 2u);
        const auto& a = second.seqs[0].block_table;
        const auto& b = second.seqs[1].block_table;
        EXPECT_EQ(std::vector<int32_t>(a.begin(), a.begin() + 5), std::vector<int32_t>(b.begin(), b.begin() + 5));
        EXPECT_NE(a[5], b[5]);  // each decodes into its own private page
        EXPECT_EQ(h.batcher->pages().ref_count(a[0]), 2);
        h.run_until_idle(10);
      });
}

TEST_F(BatcherScenario, CopyOnWriteOfASharedPageThatMustBeWritten) {
  const auto prompt = iota_tokens(10, 8);  // exactly 2 pages
  StepPlan a_first, b_first;
  Scenario("copy-on-write of a shared partial page")
      .Given("A, whose 8-token prompt fills 2 pages, is decoding", [&] {
        h.submit(make_request(1, prompt, 6));
        a_first = h.step();
      })
      .When("B arrives with the same prompt (fully cached; its last token must be recomputed for logits)", [&] {
        h.submit(make_request(2, prompt, 6));
        b_first = h.plan();
      })
      .Then("the plan copies A's second page into a private page and B computes only position 7 there", [&] {
        const SeqPlan* b = Harness::find(b_first, 2);
        ASSERT_NE(b, nullptr);
        ASSERT_EQ(b_first.copies.size(), 1u);
        EXPECT_EQ(b_first.copies[0].src, a_first.seqs[0].block_table[1]);
        EXPECT_EQ(b->block_table[0], a_first.seqs[0].block_table[0]);
        EXPECT_EQ(b->block_table[1], b_first.copies[0].dst);
        EXPECT_NE(b->block_table[1], a_first.seqs[0].block_table[1]);
        EXPECT_EQ(b->start_pos, 7);
        EXPECT_EQ(b->tokens, (std::vector<int32_t>{prompt[7]}));
        EXPECT_TRUE(b->sample);
        // The shared first page is held by both; the copy only by B.
        EXPECT_EQ(h.batcher->pages().ref_count(b->block_table[0]), 2);
        EXPECT_EQ(h.batcher->pages().ref_count(b->block_table[1]), 1);
      })
      .And("both run to the end reading correct K/V (the fake worker checks every position)", [&] {
        h.apply(b_first);
        h.run_until_idle(20);
        EXPECT_EQ(h.output_of(2).front(), h.worker.token_for(2, 8));
        ASSERT_NE(h.finish_of(2), nullptr);
        EXPECT_EQ(h.finish_of(2)->usage.cached_prompt_tokens, 7);
        EXPECT_EQ(h.batcher->stats().page_copies, 1);
      });
}

TEST(BatcherPreemption, PreemptionAndResumeYieldTheSamePlan) {
  const BatcherConfig tight{.page_size = 4, .num_pages = 8, .max_context = 64, .max_step_tokens = 32, .max_running = 4};
  const BatcherConfig roomy{.page_size = 4, .num_pages = 64, .max_context = 64, .max_step_tokens = 32, .max_running = 4};
  Harness h(tight), twin(roomy);
  const auto a = make_request(1, iota_tokens(10, 12), 6);
  const auto b = make_request(2, iota_tokens(100, 12), 10);
  std::vector<int32_t> b_pages_before, b_out_before;
  StepPlan preempting, resumed;
  Scenario("preemption by recompute")
      .Given("A and B prefilled into a pool of 8 pages, and a twin batcher with room for both", [&] {
        for (Harness* x : {&h, &twin}) {
          x->submit(a);
          x->submit(b);
        }
        StepPlan first = h.step();
        twin.step();
        b_pages_before = Harness::find(first, 2)->block_table;
      })
      .When("both decode until the pool runs out", [&] {
        for (int i = 0; i < 10 && h.batcher->stats().preemptions == 0; ++i) {
          preempting = h.step();
          twin.step();
        }
      })
      .Then("B, the later arrival, is the victim: released to the worker and not planned", [&] {
        EXPECT_EQ(h.batcher->stats().preemptions, 1);
        EXPECT_EQ(preempting.released, (std::vector<uint64_t>{2}));
        EXPECT_EQ(Harness::find(preempting, 2), nullptr);
        EXPECT_NE(Harness::find(preempting, 1), nullptr);
        EXPECT_EQ(h.batcher->num_waiting(), 1);
      })
      .And("its prefix is still matchable in the index", [&] {
        EXPECT_GE(h.batcher->index().peek(b.ns, b.prompt), 8);
      })
      .When("A finishes and B is re-admitted", [&] {
        for (int i = 0; i < 20 && resumed.seqs.empty(); ++i) {
          StepPlan p = h.plan();
          if (Harness::find(p, 2) != nullptr) {
            resumed = p;
            b_out_before = h.output_of(2);
          }
          h.apply(p);
        }
      })
      .Then("B recomputes only past its matched prefix, on its old prefix pages, with its history", [&] {
        const SeqPlan* r = Harness::find(resumed, 2);
        ASSERT_NE(r, nullptr);
        EXPECT_EQ(r->start_pos % 4, 0);
        EXPECT_GE(r->start_pos, 8);
        const std::vector<int32_t>& b_out = b_out_before;
        EXPECT_EQ(r->generated, b_out);
        EXPECT_TRUE(r->sample);
        for (int32_t i = 0; i < r->start_pos / 4; ++i) EXPECT_EQ(r->block_table[static_cast<size_t>(i)], b_pages_before[static_cast<size_t>(i)]);
        EXPECT_EQ(r->start_pos + static_cast<int32_t>(r->tokens.size()), 12 + static_cast<int32_t>(b_out.size()));
      })
      .And("from then on B's plans and outputs equal the twin's, which was never preempted", [&] {
        h.run_until_idle(40);
        twin.run_until_idle(40);
        const SeqPlan* r = Harness::find(resumed, 2);
        ASSERT_NE(r, nullptr);
        const int32_t resumed_end = r->start_pos + static_cast<int32_t>(r->tokens.size());
        std::map<int32_t, SeqPlan> twin_plans;
        for (const SeqPlan& s : twin.plans_of(2)) twin_plans[s.start_pos] = s;
        int compared = 0;
        for (const SeqPlan& s : h.plans_of(2)) {
          if (s.start_pos < resumed_end) continue;
          ASSERT_EQ(twin_plans.count(s.start_pos), 1u) << "position " << s.start_pos;
          const SeqPlan& t = twin_plans[s.start_pos];
          EXPECT_EQ(s.tokens, t.tokens);
          EXPECT_EQ(s.sample, t.sample);
          EXPECT_EQ(s.block_table.size(), t.block_table.size());
          EXPECT_EQ(std::vector<int32_t>(s.block_table.begin(), s.block_table.begin() + 3),
                    std::vector<int32_t>(t.block_table.begin(), t.block_table.begin() + 3));  // the shared prompt pages
          ++compared;
        }
        EXPECT_GT(compared, 0);
        EXPECT_EQ(h.output_of(2), twin.output_of(2));
        EXPECT_EQ(h.output_of(1), twin.output_of(1));
        ASSERT_NE(h.finish_of(2), nullptr);
        EXPECT_EQ(h.finish_of(2)->reason, twin.finish_of(2)->reason);
        EXPECT_EQ(h.finish_of(2)->usage.completion_tokens, 10);
        EXPECT_EQ(twin.batcher->stats().preemptions, 0);
      });
  h.expect_invariants();
  EXPECT_EQ(h.batcher->pages().num_held(), 0);
}

TEST(BatcherPreemption, TheLowestPriorityIsPreemptedFirst) {
  Harness h(BatcherConfig{.page_size = 4, .num_pages = 8, .max_context = 64, .max_step_tokens = 32, .max_running = 4});
  h.submit(make_request(1, iota_tokens(10, 12), 8, /*priority=*/0));  // arrives first, low priority
  h.submit(make_request(2, iota_tokens(100, 12), 8, /*priority=*/1));
  StepPlan p;
  for (int i = 0; i < 10 && h.batcher->stats().preemptions == 0; ++i) p = h.step();
  EXPECT_EQ(p.released, (std::vector<uint64_t>{1}));
  EXPECT_NE(Harness::find(p, 2), nullptr);
  h.run_until_idle(60);
  EXPECT_EQ(h.finished.size(), 2u);
}

TEST(BatcherPriority, HigherPriorityIsAdmittedFirst) {
  Harness h(BatcherConfig{.page_size = 4, .num_pages = 16, .max_context = 64, .max_step_tokens = 32, .max_running = 1});
  h.submit(make_request(1, iota_tokens(10, 5), 2, 0));
  h.submit(make_request(2, iota_tokens(20, 5), 2, 3));
  StepPlan p = h.step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].request_id, 2u);
  h.run_until_idle(20);
  EXPECT_EQ(h.finished.size(), 2u);
}

TEST_F(BatcherScenario, CancellationMidPrefillReleasesEverything) {
  Harness c(BatcherConfig{.page_size = 4, .num_pages = 16, .max_context = 64, .max_step_tokens = 8, .max_running = 4});
  StepPlan in_flight;
  Scenario("cancel mid-prefill")
      .Given("A's 30-token prompt is being prefilled in 8-token chunks, one chunk applied, one in flight", [&] {
        c.submit(make_request(1, iota_tokens(10, 30), 5));
        c.step();
        in_flight = c.plan();
        EXPECT_GT(c.batcher->pages().num_held(), 0);
      })
      .When("A is cancelled", [&] {
        auto ev = c.batcher->cancel(1);
        ASSERT_OK(ev);
        EXPECT_EQ(ev->reason, FinishReason::kCancelled);
      })
      .Then("it holds nothing at once: its pages are free or cached", [&] {
        EXPECT_EQ(c.batcher->pages().num_held(), 0);
        c.expect_invariants();
      })
      .And("the in-flight result is ignored and the next plan releases A on the worker", [&] {
        c.apply(in_flight);
        EXPECT_TRUE(c.tokens.empty());
        StepPlan next = c.step();
        EXPECT_EQ(next.released, (std::vector<uint64_t>{1}));
        EXPECT_FALSE(c.batcher->has_work());
        EXPECT_EQ(c.batcher->cancel(1).error().code, ErrorCode::kNotFound);
      });
}

TEST_F(BatcherScenario, CancellationMidDecodeReleasesEverything) {
  StepPlan in_flight;
  Scenario("cancel mid-decode")
      .Given("A and B decoding, A's next decode in flight", [&] {
        h.submit(make_request(1, iota_tokens(10, 6), 20));
        h.submit(make_request(2, iota_tokens(10, 6), 20));
        h.step();
        h.step();
        in_flight = h.plan();
      })
      .When("A is cancelled", [&] { ASSERT_OK(h.batcher->cancel(1)); })
      .Then("A's result is dropped, B continues, and A holds nothing", [&] {
        const size_t a_tokens = h.output_of(1).size();
        h.apply(in_flight);
        EXPECT_EQ(h.output_of(1).size(), a_tokens);
        StepPlan next = h.step();
        EXPECT_EQ(next.released, (std::vector<uint64_t>{1}));
        EXPECT_EQ(Harness::find(next, 1), nullptr);
        EXPECT_NE(Harness::find(next, 2), nullptr);
        // Only B holds pages: its block table.
        EXPECT_EQ(h.batcher->pages().num_held(), static_cast<int32_t>(Harness::find(next, 2)->block_table.size()));
      })
      .And("cancelling B between steps leaves nothing held", [&] {
        ASSERT_OK(h.batcher->cancel(2));
        EXPECT_EQ(h.batcher->pages().num_held(), 0);
        h.run_until_idle(3);
      });
}

TEST(BatcherStops, EosStopIdsMaxTokensAndContextLengthEndASequence) {
  {  // EOS: every sampled token is EOS; it is not an output token
    Harness h(small_config(), /*eos_one_in=*/1);
    auto r = make_request(1, iota_tokens(10, 5), 10);
    r.ignore_eos = false;
    h.submit(r);
    h.run_until_idle(5);
    ASSERT_EQ(h.finished.size(), 1u);
    EXPECT_EQ(h.finished[0].reason, FinishReason::kStop);
    EXPECT_EQ(h.finished[0].stop_token, tessera::testing::kEos);
    EXPECT_EQ(h.finished[0].usage.completion_tokens, 1);
    EXPECT_TRUE(h.tokens.empty());
  }
  {  // ignore_eos keeps going to max_tokens
    Harness h(small_config(), 1);
    h.submit(make_request(1, iota_tokens(10, 5), 4));
    h.run_until_idle(10);
    EXPECT_EQ(h.finished.at(0).reason, FinishReason::kLength);
    EXPECT_EQ(h.tokens.size(), 4u);
  }
  {  // a stop id: the third sampled token
    Harness h(small_config());
    auto r = make_request(7, iota_tokens(10, 5), 10);
    r.stop_ids = {h.worker.token_for(7, 7)};
    h.submit(r);
    h.run_until_idle(10);
    EXPECT_EQ(h.finished.at(0).reason, FinishReason::kStop);
    EXPECT_EQ(h.finished.at(0).stop_token, h.worker.token_for(7, 7));
    EXPECT_EQ(h.output_of(7), (std::vector<int32_t>{h.worker.token_for(7, 5), h.worker.token_for(7, 6)}));
  }
  {  // context length: 10 prompt tokens in a 16-position context leave 6 to generate
    Harness h(BatcherConfig{.page_size = 4, .num_pages = 16, .max_context = 16, .max_step_tokens = 32, .max_running = 4});
    h.submit(make_request(1, iota_tokens(10, 10), 100));
    h.run_until_idle(20);
    EXPECT_EQ(h.finished.at(0).reason, FinishReason::kContextLength);
    EXPECT_EQ(h.tokens.size(), 6u);
  }
}

TEST(BatcherSubmit, BadRequestsGetErrorsNamingTheProblem) {
  Harness h(BatcherConfig{.page_size = 4, .num_pages = 8, .max_context = 64, .max_step_tokens = 8, .max_running = 4, .max_waiting = 2});
  auto code = [&](Request r) { auto st = h.batcher->submit(std::move(r)); return st.ok() ? ErrorCode::kOk : st.error().code; };
  EXPECT_EQ(code(make_request(1, {}, 4)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(make_request(1, {1, -5}, 4)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(make_request(1, {1, 2}, 0)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(make_request(1, iota_tokens(0, 64), 1)), ErrorCode::kTooLarge);   // no room to generate
  EXPECT_EQ(code(make_request(1, iota_tokens(0, 30), 10)), ErrorCode::kTooLarge);  // 40 positions > 8 pages of 4
  auto pref = make_request(1, {1, 2}, 1);
  pref.preference = Preference{.blob_key = "k", .num_tokens = 4, .alpha = 0.5f};
  EXPECT_EQ(code(pref), ErrorCode::kInvalidArgument);  // namespace lacks the user
  EXPECT_EQ(code(make_request(1, {1, 2}, 4)), ErrorCode::kOk);
  EXPECT_EQ(code(make_request(1, {1, 2}, 4)), ErrorCode::kInvalidArgument);  // duplicate id
  EXPECT_EQ(code(make_request(2, {1, 2}, 4)), ErrorCode::kOk);
  EXPECT_EQ(code(make_request(3, {1, 2}, 4)), ErrorCode::kOverloaded);
  auto msg = h.batcher->submit(make_request(4, {}, 4));
  EXPECT_NE(msg.error().message.find("prompt is empty"), std::string::npos);
  EXPECT_FALSE(Batcher::create(BatcherConfig{.max_step_tokens = 4, .max_running = 8}).ok());
  EXPECT_FALSE(Batcher::create(BatcherConfig{.page_size = 0}).ok());
}

TEST(BatcherPreference, APreferenceIsFilledOnceAndThenReusedWithinItsNamespaceOnly) {
  Harness h(BatcherConfig{.page_size = 4, .num_pages = 32, .max_context = 64, .max_step_tokens = 32, .max_running = 4});
  auto with_pref = [](uint64_t id, std::vector<int32_t> prompt, const std::string& user) {
    auto r = make_request(id, std::move(prompt), 2);
    r.ns.user = user;
    r.ns.preference_hash = 77;
    r.ns.alpha = 0.5f;
    r.preference = Preference{.blob_key = "pref/" + user, .num_tokens = 6, .alpha = 0.5f};
    return r;
  };
  StepPlan p1, p2, p3;
  Scenario("preference injection")
      .Given("u1's request with a 6-token preference", [&] {
        h.submit(with_pref(1, {40, 41, 42, 43, 44}, "u1"));
        p1 = h.step();
      })
      .Then("the plan fills positions [0, 6) from the blob into its first 2 pages and computes from 6", [&] {
        ASSERT_EQ(p1.fills.size(), 1u);
        EXPECT_EQ(p1.fills[0].request_id, 1u);
        EXPECT_EQ(p1.fills[0].blob_key, "pref/u1");
        EXPECT_EQ(p1.fills[0].num_tokens, 6);
        EXPECT_FLOAT_EQ(p1.fills[0].alpha, 0.5f);
        EXPECT_EQ(p1.fills[0].pages, std::vector<int32_t>(p1.seqs[0].block_table.begin(), p1.seqs[0].block_table.begin() + 2));
        EXPECT_EQ(p1.seqs[0].start_pos, 6);
        EXPECT_EQ(p1.seqs[0].tokens, (std::vector<int32_t>{40, 41, 42, 43, 44}));
      })
      .When("u1's next request shares 2 prompt tokens", [&] {
        h.run_until_idle(5);
        h.submit(with_pref(2, {40, 41, 90, 91}, "u1"));
        p2 = h.step();
      })
      .Then("no fill: the preference pages and the shared page are reused", [&] {
        EXPECT_TRUE(p2.fills.empty());
        EXPECT_EQ(p2.seqs.at(0).start_pos, 8);
        h.run_until_idle(5);
        EXPECT_EQ(h.finish_of(2)->usage.cached_prompt_tokens, 2);
      })
      .When("user u2 sends the same prompt with the same preference hash", [&] {
        h.submit(with_pref(3, {40, 41, 42, 43, 44}, "u2"));
        p3 = h.step();
      })
      .Then("nothing of u1's is shared: u2 gets its own fill", [&] {
        ASSERT_EQ(p3.fills.size(), 1u);
        EXPECT_EQ(p3.fills[0].blob_key, "pref/u2");
        for (int32_t page : p3.fills[0].pages) {
          EXPECT_EQ(std::count(p1.seqs[0].block_table.begin(), p1.seqs[0].block_table.end(), page), 0);
        }
        h.run_until_idle(5);
      });
}

TEST_F(BatcherScenario, AFailedStepFinishesItsSequencesWithAnError) {
  h.submit(make_request(1, iota_tokens(10, 6), 5));
  h.submit(make_request(2, iota_tokens(30, 6), 5));
  StepPlan p = h.plan();
  StepResult failed;
  failed.step_id = p.step_id;
  failed.error_code = ErrorCode::kInternal;
  failed.error_message = "device lost";
  h.apply_result(failed);
  ASSERT_EQ(h.finished.size(), 2u);
  for (const auto& f : h.finished) {
    EXPECT_EQ(f.reason, FinishReason::kError);
    EXPECT_NE(f.message.find("device lost"), std::string::npos);
  }
  EXPECT_EQ(h.batcher->pages().num_held(), 0);
  EXPECT_EQ(h.step().released.size(), 2u);
}

TEST_F(BatcherScenario, FailAllEndsEveryRequestWhenTheWorkerDies) {
  Scenario("worker death")
      .Given("two running requests, one waiting, and a plan in flight", [&] {
        h.submit(make_request(1, iota_tokens(10, 6), 20));
        h.submit(make_request(2, iota_tokens(30, 6), 20));
        h.step();
        h.submit(make_request(3, iota_tokens(50, 6), 20));
        h.plan();
      })
      .When("the worker is declared dead", [&] {
        const auto events = h.batcher->fail_all("worker w0 stopped heartbeating");
        ASSERT_EQ(events.size(), 3u);
        for (const auto& e : events) {
          EXPECT_EQ(e.reason, FinishReason::kError);
          EXPECT_EQ(e.message, "worker w0 stopped heartbeating");
        }
      })
      .Then("nothing is live, held or outstanding, and the batcher can serve again", [&] {
        EXPECT_FALSE(h.batcher->has_work());
        EXPECT_FALSE(h.batcher->plan_outstanding());
        EXPECT_EQ(h.batcher->pages().num_held(), 0);
        h.submit(make_request(4, iota_tokens(10, 6), 2));
        h.run_until_idle(5);
        ASSERT_NE(h.finish_of(4), nullptr);
        EXPECT_EQ(h.finish_of(4)->reason, FinishReason::kLength);
      });
}

TEST_F(BatcherScenario, AResultThatDoesNotMatchThePlanIsRejected) {
  h.submit(make_request(1, iota_tokens(10, 6), 5));
  StepPlan p = h.plan();
  EXPECT_EQ(h.batcher->step().error().code, ErrorCode::kInvalidArgument);  // one plan at a time
  StepResult wrong_step;
  wrong_step.step_id = p.step_id + 1;
  EXPECT_EQ(h.batcher->apply(wrong_step).error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(h.batcher->plan_outstanding());
  StepResult missing;  // the plan asked for one sample, this has none
  missing.step_id = p.step_id;
  h.apply_result(missing);
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_EQ(h.finished[0].reason, FinishReason::kError);
  h.run_until_idle(3);
}

}  // namespace
}  // namespace tessera::scheduler
