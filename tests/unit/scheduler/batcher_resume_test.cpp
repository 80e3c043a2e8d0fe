// A migrated request (Request::generated, docs/scheduler.md "Failover and migration"): a batcher
// that never saw it resumes it after the tokens it already generated elsewhere, and produces
// exactly the rest of the uninterrupted output, with indices, usage and penalty history right.
#include <gtest/gtest.h>

#include "batcher_harness.h"

namespace tessera::testing {
namespace {

BatcherConfig resume_config() {
  return BatcherConfig{.page_size = 4, .num_pages = 16, .max_context = 64, .max_step_tokens = 32, .max_running = 4};
}

TEST(BatcherResume, AMigratedRequestContinuesWhereItStopped) {
  const auto prompt = iota_tokens(10, 10);
  constexpr int32_t kMax = 8, kDone = 3;
  Harness whole(resume_config()), resumed(resume_config());
  std::vector<int32_t> want;
  Scenario("migration")
      .Given("the uninterrupted output of a request", [&] {
        whole.submit(make_request(7, prompt, kMax));
        whole.run_until_idle(50);
        want = whole.output_of(7);
        ASSERT_EQ(want.size(), static_cast<size_t>(kMax));
      })
      .When("another batcher gets it with its first 3 tokens as `generated`", [&] {
        Request r = make_request(7, prompt, kMax);
        r.generated.assign(want.begin(), want.begin() + kDone);
        std::vector<int32_t> key = prompt;
        key.insert(key.end(), r.generated.begin(), r.generated.end());
        resumed.worker.expect(7, key);
        ASSERT_TRUE(resumed.batcher->submit(r).ok());
        resumed.run_until_idle(50);
      })
      .Then("its first plan prefills prompt + those tokens and sends them as history", [&] {
        const auto plans = resumed.plans_of(7);
        ASSERT_FALSE(plans.empty());
        std::vector<int32_t> key = prompt;
        key.insert(key.end(), want.begin(), want.begin() + kDone);
        EXPECT_EQ(plans[0].tokens, key);
        EXPECT_EQ(plans[0].start_pos, 0);
        EXPECT_EQ(plans[0].generated, std::vector<int32_t>(want.begin(), want.begin() + kDone));
      })
      .And("it emits exactly the rest, indices continuing from 3", [&] {
        EXPECT_EQ(resumed.output_of(7), std::vector<int32_t>(want.begin() + kDone, want.end()));
        ASSERT_FALSE(resumed.tokens.empty());
        EXPECT_EQ(resumed.tokens.front().index, kDone);
        EXPECT_EQ(resumed.tokens.back().index, kMax - 1);
      })
      .And("it ends by length with usage over the whole request", [&] {
        const FinishEvent* f = resumed.finish_of(7);
        ASSERT_NE(f, nullptr);
        EXPECT_EQ(f->reason, FinishReason::kLength);
        EXPECT_EQ(f->usage.prompt_tokens, 10);
        EXPECT_EQ(f->usage.completion_tokens, kMax);
        EXPECT_EQ(f->usage.cached_prompt_tokens, 0);
      });
}

TEST(BatcherResume, ResumingAfterEverythingOrBadTokensIsRefused) {
  Harness h(resume_config());
  Request done = make_request(1, iota_tokens(10, 4), 3);
  done.generated = {5, 6, 7};
  auto st = h.batcher->submit(done);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("nothing left to generate"), std::string::npos) << st.error().message;
  Request bad = make_request(2, iota_tokens(10, 4), 8);
  bad.generated = {5, -3};
  st = h.batcher->submit(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("negative token id -3"), std::string::npos) << st.error().message;
}

}  // namespace
}  // namespace tessera::testing
