// Seeded randomized simulation of one worker's batcher: thousands of requests with shared
// prefixes (Zipf-like choice among a few dozen), preferences, priorities, random cancellations,
// occasional failed steps, and a page pool small enough to force eviction and preemption.
// After every step the Harness audits the page invariant (free + held + cached == total), the
// reference counts, the radix index, and the FakeWorker checks every K/V position every
// sequence reads. At the end every request has finished or was cancelled exactly once and
// nothing is held: no leak, no starvation, no deadlock (every step with live work computes
// something).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "batcher_harness.h"

namespace tessera::scheduler {
namespace {

using tessera::testing::Harness;

struct SimParams {
  uint64_t seed;
  int32_t requests;
};

class BatcherSimulation : public ::testing::TestWithParam<SimParams> {};

TEST_P(BatcherSimulation, EveryRequestFinishesOrIsCancelledAndNothingLeaks) {
  const SimParams sp = GetParam();
  const BatcherConfig config{.page_size = 8, .num_pages = 80, .max_context = 256, .max_step_tokens = 64, .max_prefill_chunk = 24,
                             .max_running = 12, .max_waiting = 100000, .eos_ids = {}};
  Harness h(config, /*eos_one_in=*/40);
  std::mt19937_64 rng(sp.seed);
  auto uniform = [&](int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); };

  std::vector<std::vector<int32_t>> prefixes(24);
  for (auto& p : prefixes) {
    p.resize(static_cast<size_t>(uniform(4, 90)));
    for (auto& t : p) t = uniform(3, 999);
  }
  const std::vector<std::string> users = {"ann", "bob", "cy"};

  std::set<uint64_t> live;
  std::map<uint64_t, int> finish_count;
  uint64_t next_id = 1;
  int64_t steps = 0, failed_steps = 0;
  const int64_t max_steps = 200000;

  while ((next_id <= static_cast<uint64_t>(sp.requests) || h.batcher->has_work()) && steps < max_steps) {
    // Arrivals.
    const int arrivals = next_id <= static_cast<uint64_t>(sp.requests) ? uniform(0, 2) : 0;
    for (int i = 0; i < arrivals && next_id <= static_cast<uint64_t>(sp.requests); ++i) {
      const size_t k = static_cast<size_t>(std::min(uniform(0, 23), uniform(0, 23)));  // skewed to low k
      std::vector<int32_t> prompt = prefixes[k];
      if (uniform(0, 9) == 0 && prompt.size() >= 8) {
        prompt.resize(prompt.size() / 8 * 8);  // a page-aligned repeat: fully cached, needs copy-on-write
      } else {
        const int32_t suffix = uniform(1, 40);
        for (int32_t j = 0; j < suffix; ++j) prompt.push_back(uniform(3, 999));
      }
      Request r = tessera::testing::make_request(next_id, std::move(prompt), uniform(1, 24), uniform(0, 9) == 0 ? 1 : 0);
      r.ignore_eos = uniform(0, 1) == 0;
      if (uniform(0, 19) == 0) {
        const std::string& u = users[static_cast<size_t>(uniform(0, 2))];
        r.ns.user = u;
        r.ns.preference_hash = 1000 + static_cast<uint64_t>(u.size());
        r.ns.alpha = 0.5f;
        r.preference = Preference{.blob_key = "pref/" + u, .num_tokens = 3 + static_cast<int32_t>(u.size()) * 3, .alpha = 0.5f};
      }
      h.submit(r);
      live.insert(next_id);
      ++next_id;
    }
    // Random cancellations, between steps and while a plan is in flight.
    auto cancel_one = [&] {
      if (live.empty() || uniform(0, 99) >= 3) return;
      auto it = live.begin();
      std::advance(it, uniform(0, static_cast<int32_t>(live.size()) - 1));
      auto ev = h.batcher->cancel(*it);
      ASSERT_TRUE(ev.ok()) << ev.error().to_string();
      h.finished.push_back(*ev);
      live.erase(it);
    };
    cancel_one();
    StepPlan plan = h.plan();
    if (!live.empty()) {
      ASSERT_FALSE(plan.seqs.empty()) << "step " << plan.step_id << ": live requests but nothing planned (deadlock)";
    }
    cancel_one();
    if (uniform(0, 999) == 0) {  // the worker fails a step now and then
      StepResult failed;
      failed.step_id = plan.step_id;
      failed.error_code = ErrorCode::kInternal;
      failed.error_message = "injected failure";
      ++failed_steps;
      h.apply_result(failed);
    } else {
      h.apply(plan);
    }
    for (const auto& f : h.finished) ++finish_count[f.request_id];
    for (const auto& f : h.finished) live.erase(f.request_id);
    h.finished.clear();
    ++steps;
    if (::testing::Test::HasFailure()) break;
  }

  ASSERT_LT(steps, max_steps) << "did not drain: deadlock or starvation";
  EXPECT_TRUE(live.empty());
  ASSERT_EQ(finish_count.size(), static_cast<size_t>(sp.requests));
  for (const auto& [id, n] : finish_count) ASSERT_EQ(n, 1) << "request " << id;
  EXPECT_EQ(h.batcher->pages().num_held(), 0);
  EXPECT_EQ(h.batcher->num_running() + h.batcher->num_waiting(), 0);
  h.expect_invariants();
  // The workload did exercise what it is meant to.
  const BatcherStats& st = h.batcher->stats();
  const RadixStats& rs = h.batcher->index().stats();
  EXPECT_GT(st.preemptions, 0);
  EXPECT_GT(st.cancelled, 0);
  EXPECT_GT(rs.evicted_tokens, 0);
  EXPECT_GT(st.cached_prompt_tokens, 0);
  EXPECT_GT(st.page_copies, 0);
  RecordProperty("steps", static_cast<int>(steps));
  std::printf("seed %llu: %lld steps, %lld preemptions, %lld cancelled, %lld copies, %lld failed steps, prefix hit %.1f%%, evicted %lld tokens\n",
              static_cast<unsigned long long>(sp.seed), static_cast<long long>(steps), static_cast<long long>(st.preemptions),
              static_cast<long long>(st.cancelled), static_cast<long long>(st.page_copies), static_cast<long long>(failed_steps),
              100.0 * static_cast<double>(st.cached_prompt_tokens) / static_cast<double>(std::max<int64_t>(1, st.prompt_tokens)),
              static_cast<long long>(rs.evicted_tokens));
}

INSTANTIATE_TEST_SUITE_P(Seeds, BatcherSimulation,
                         ::testing::Values(SimParams{1, 3000}, SimParams{20261121, 3000}, SimParams{777, 2000}),
                         [](const ::testing::TestParamInfo<SimParams>& i) { return "seed" + std::to_string(i.param.seed); });

}  // namespace
}  // namespace tessera::scheduler
