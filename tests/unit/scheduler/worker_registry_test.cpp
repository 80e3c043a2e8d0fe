// WorkerRegistry::publish()'s counters (scheduler/app/worker_registry.h): the scheduler's
// preemption counter is the sum of every Batcher's preemptions, those of workers removed since
// included — exactly, at each publish, and never going backwards — when a worker leaves between
// two publishes after both it and another worker preempted (the counters used to be built from
// sums over the workers still registered, losing the others' increments).
#include "worker_registry.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

namespace tessera::scheduler_app {
namespace {

protocol::RegisterWorker tight_worker() {
  // 8 pages of 4 tokens: two requests of 12 + 10 tokens (6 pages each) cannot both finish
  // without one being preempted.
  return protocol::RegisterWorker{.model_fingerprint = 1, .num_pages = 8, .page_size = 4,
                                  .max_batch_tokens = 32, .max_seq_len = 64, .vocab_size = 100};
}

scheduler::Request request(uint64_t id) {
  scheduler::Request r;
  r.id = id;
  r.prompt.resize(12);
  std::iota(r.prompt.begin(), r.prompt.end(), static_cast<int32_t>(id * 16 % 80));
  r.ns.model_fingerprint = "test-model";
  r.max_tokens = 10;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  return r;
}

StepResult answer(const StepPlan& plan) {
  StepResult r;
  r.step_id = plan.step_id;
  for (const SeqPlan& s : plan.seqs) {
    if (s.sample) r.results.push_back({.request_id = s.request_id, .token = 7, .logprob = 0.0f, .top = {}});
  }
  return r;
}

class WorkerRegistryCounters : public ::testing::Test {
 protected:
  void SetUp() override {
    workers = std::make_unique<WorkerRegistry>(WorkerLimits{}, LivenessConfig{},
                                               std::move(*scheduler::Router::create({})), m);
  }

  // Two requests on `name`, run to the end; returns the preemptions that took (at least one).
  int64_t preempting_pair(const std::string& name) {
    scheduler::Batcher& b = *workers->find(name)->batcher;
    const int64_t before = b.stats().preemptions;
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(workers->place_on(name, request(next_id++)).ok());
    for (int i = 0; i < 100 && b.has_work(); ++i) {
      auto plan = b.step();
      EXPECT_TRUE(plan.ok()) << plan.error().to_string();
      if (!plan.ok()) break;
      auto out = b.apply(answer(*plan));
      EXPECT_TRUE(out.ok()) << out.error().to_string();
    }
    EXPECT_FALSE(b.has_work()) << "the pair did not finish";
    const int64_t made = b.stats().preemptions - before;
    EXPECT_GE(made, 1) << "the scenario did not preempt";
    return made;
  }

  // Publishes and checks the counter equals `expected` and did not go back.
  void publish_and_expect(int64_t expected) {
    workers->publish();
    const double now = m.preemptions->value();
    EXPECT_GE(now, last) << "the counter went backwards";
    EXPECT_EQ(now, static_cast<double>(expected));
    last = now;
  }

  metrics::Registry registry;
  SchedulerMetrics m = SchedulerMetrics::create(registry);
  std::unique_ptr<WorkerRegistry> workers;
  uint64_t next_id = 1;
  double last = 0;
};

TEST_F(WorkerRegistryCounters, AWorkerLeavingBetweenPublishesLosesNoCount) {
  ASSERT_TRUE(workers->add("w0", tight_worker()).ok());
  ASSERT_TRUE(workers->add("w1", tight_worker()).ok());
  int64_t total = preempting_pair("w0") + preempting_pair("w1");
  publish_and_expect(total);
  // Both preempt again; w1 leaves before the next publish: its new preemptions and w0's count.
  total += preempting_pair("w0");
  total += preempting_pair("w1");
  ASSERT_TRUE(workers->remove("w1"));
  publish_and_expect(total);
  total += preempting_pair("w0");
  publish_and_expect(total);
  // A worker re-registering under a removed name starts a new Batcher (stats from 0).
  ASSERT_TRUE(workers->add("w1", tight_worker()).ok());
  total += preempting_pair("w1");
  publish_and_expect(total);
  publish_and_expect(total);  // nothing new: unchanged
}

}  // namespace
}  // namespace tessera::scheduler_app
