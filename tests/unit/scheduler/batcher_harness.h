// Drives a Batcher against the FakeWorker, auditing every invariant around every step.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "fake_worker.h"
#include "tessera/testing/scenario.h"
#include "tessera/scheduler/batcher.h"

namespace tessera::testing {

using scheduler::Batcher;
using scheduler::BatcherConfig;
using scheduler::FinishEvent;
using scheduler::FinishReason;
using scheduler::Request;
using scheduler::TokenEvent;

constexpr int32_t kEos = 2;

inline std::vector<int32_t> iota_tokens(int32_t first, int32_t count) {
  std::vector<int32_t> v(static_cast<size_t>(count));
  std::iota(v.begin(), v.end(), first);
  return v;
}

inline Request make_request(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens, int32_t priority = 0) {
  Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.ns.model_fingerprint = "test-model";
  r.max_tokens = max_tokens;
  r.priority = priority;
  r.ignore_eos = true;
  return r;
}

class Harness {
 public:
  explicit Harness(BatcherConfig config, int32_t eos_one_in = 0)
      : worker(config.num_pages, config.page_size, 1000, kEos, eos_one_in) {
    config.eos_ids = {kEos};
    auto b = Batcher::create(config);
    EXPECT_TRUE(b.ok());
    batcher = std::move(b).value();
  }

  void submit(const Request& r) {
    std::vector<int32_t> key(static_cast<size_t>(r.preference ? r.preference->num_tokens : 0), FakeWorker::kFillMarker);
    key.insert(key.end(), r.prompt.begin(), r.prompt.end());
    worker.expect(r.id, std::move(key));
    auto st = batcher->submit(r);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
  }

  // Every written slot is in a page held only by its writer and not indexed.
  void expect_writes_private(const StepPlan& plan) const {
    for (const auto& s : plan.seqs) {
      for (int64_t slot : s.slot_mapping) {
        const auto page = static_cast<int32_t>(slot / batcher->config().page_size);
        EXPECT_EQ(batcher->pages().ref_count(page), 1) << "req " << s.request_id << " writes shared page " << page;
        EXPECT_FALSE(batcher->pages().indexed(page)) << "req " << s.request_id << " writes indexed page " << page;
      }
    }
    for (const auto& c : plan.copies) EXPECT_EQ(batcher->pages().ref_count(c.dst), 1);
  }

  void expect_invariants() const {
    const auto c = batcher->pages().counts();
    EXPECT_EQ(c.free + c.held + c.cached, c.total);
    auto st = batcher->check();
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    EXPECT_TRUE(worker.errors().empty()) << worker.errors().front();
  }

  StepPlan plan() {
    auto p = batcher->step();
    EXPECT_TRUE(p.ok()) << p.error().to_string();
    expect_invariants();
    expect_writes_private(*p);
    history.push_back(*p);
    return std::move(p).value();
  }

  void apply(const StepPlan& p) { apply_result(worker.execute(p)); }

  void apply_result(const StepResult& r) {
    auto out = batcher->apply(r);
    EXPECT_TRUE(out.ok()) << out.error().to_string();
    if (out.ok()) {
      last_tokens = out->tokens;
      tokens.insert(tokens.end(), out->tokens.begin(), out->tokens.end());
      finished.insert(finished.end(), out->finished.begin(), out->finished.end());
    }
    expect_invariants();
  }

  StepPlan step() {
    StepPlan p = plan();
    apply(p);
    return p;
  }

  int run_until_idle(int max_steps) {
    int n = 0;
    while (batcher->has_work() && n < max_steps && !::testing::Test::HasFailure()) {
      step();
      ++n;
    }
    return n;
  }

  std::vector<int32_t> output_of(uint64_t id) const {
    std::vector<int32_t> out;
    for (const auto& t : tokens) {
      if (t.request_id == id) out.push_back(t.token);
    }
    return out;
  }
  const FinishEvent* finish_of(uint64_t id) const {
    for (const auto& f : finished) {
      if (f.request_id == id) return &f;
    }
    return nullptr;
  }
  // The request's share of every plan so far, in order.
  std::vector<SeqPlan> plans_of(uint64_t id) const {
    std::vector<SeqPlan> out;
    for (const auto& p : history) {
      if (const SeqPlan* s = find(p, id)) out.push_back(*s);
    }
    return out;
  }
  static const SeqPlan* find(const StepPlan& p, uint64_t id) {
    for (const auto& s : p.seqs) {
      if (s.request_id == id) return &s;
    }
    return nullptr;
  }

  FakeWorker worker;
  std::unique_ptr<Batcher> batcher;
  std::vector<TokenEvent> tokens;
  std::vector<TokenEvent> last_tokens;
  std::vector<FinishEvent> finished;
  std::vector<StepPlan> history;  // every plan, in order
};

}  // namespace tessera::testing
