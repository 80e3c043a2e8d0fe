// In-process serving loop for the K/V policy tests and the quality table: the real Batcher
// (scheduler/) plans, a StepExecutor over the real CPU backend executes, the Batcher applies —
// the same plan/execute/apply cycle as the cluster, without sockets. A tap on the backend keeps
// each step's logits so a run can be teacher-forced: every sampled token is replaced by the
// next token of a fixed continuation, and the continuation's negative log-likelihood and the
// backend's greedy agreement with it are recorded. Batcher::check() runs after every step.
//
// Ownership: the Driver borrows the Engine (its backend and pool) and owns the Batcher. Threads:
// one (the test's).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "tessera/scheduler/batcher.h"
#include "tessera/worker/engine.h"
#include "tessera/worker/step_executor.h"

namespace tessera::kvtest {

// Delegates to the engine's backend and keeps a copy of the last forward's logits.
class TapBackend final : public worker::Backend {
 public:
  explicit TapBackend(worker::Backend& inner) : in_(inner) {}
  std::string_view name() const override { return in_.name(); }
  const Model& model() const override { return in_.model(); }
  worker::PoolGeometry geometry() const override { return in_.geometry(); }
  worker::BackendCaps capabilities() const override { return in_.capabilities(); }
  Result<std::span<float>> forward(std::span<const worker::SeqInput> batch) override {
    auto r = in_.forward(batch);
    if (r.ok()) rows.assign(r->begin(), r->end());
    return r;
  }
  Status copy_page(int32_t s, int32_t d) override { return in_.copy_page(s, d); }
  Status read_kv(int32_t l, std::span<const int64_t> s, std::span<float> k, std::span<float> v) override {
    return in_.read_kv(l, s, k, v);
  }
  Status write_kv(int32_t l, std::span<const int64_t> s, std::span<const float> k, std::span<const float> v) override {
    return in_.write_kv(l, s, k, v);
  }
  std::vector<float> rows;

 private:
  worker::Backend& in_;
};

struct Output {
  std::vector<int32_t> tokens;        // generated (forced ones when forced)
  std::vector<double> nll;            // per forced token: -log p(token)
  int32_t agree = 0;                  // forced tokens that were also the argmax
  scheduler::FinishEvent finish;
  bool done = false;
  std::vector<int32_t> forced;        // the continuation to force (empty: free-running)
};

class Driver {
 public:
  Driver(worker::Engine& engine, scheduler::BatcherConfig cfg) : tap_(engine.backend()), exec_(tap_) {
    auto b = scheduler::Batcher::create(std::move(cfg));
    EXPECT_TRUE(b.ok());
    batcher_ = std::move(*b);
  }

  Status submit(scheduler::Request r, std::vector<int32_t> forced = {}) {
    outs_[r.id].forced = std::move(forced);
    return batcher_->submit(std::move(r));
  }

  // Runs until nothing is live; false on an error (reported through gtest).
  bool run() {
    while (batcher_->has_work()) {
      auto plan = batcher_->step();
      if (!plan.ok()) return fail("step: " + plan.error().to_string());
      StepResult res;
      res.step_id = plan->step_id;
      if (scheduler::needs_worker(*plan)) {
        auto r = exec_.execute(*plan);
        if (!r.ok()) return fail("execute: " + r.error().to_string());
        res = std::move(*r);
        force(*plan, res);
      }
      auto out = batcher_->apply(res);
      if (!out.ok()) return fail("apply: " + out.error().to_string());
      for (const auto& t : out->tokens) outs_[t.request_id].tokens.push_back(t.token);
      for (const auto& f : out->finished) {
        outs_[f.request_id].finish = f;
        outs_[f.request_id].done = true;
      }
      if (Status c = batcher_->check(); !c.ok()) return fail("check: " + c.error().to_string());
      max_held_ = std::max(max_held_, batcher_->pages().counts().held);
      ++steps_;
    }
    return true;
  }

  Output& out(uint64_t id) { return outs_[id]; }
  scheduler::Batcher& batcher() { return *batcher_; }
  int32_t max_held_pages() const { return max_held_; }
  void reset_max_held() { max_held_ = 0; }

 private:
  bool fail(const std::string& msg) {
    ADD_FAILURE() << msg;
    return false;
  }
  // Teacher forcing: the k-th sampled row's logits score the forced token, which replaces the sample.
  void force(const StepPlan& plan, StepResult& res) {
    const auto vocab = static_cast<size_t>(tap_.model().config().vocab_size);
    size_t k = 0;
    for (const SeqPlan& s : plan.seqs) {
      if (!s.sample) continue;
      SeqResult& r = res.results[k];
      Output& o = outs_[s.request_id];
      const size_t idx = o.tokens.size();
      if (!o.forced.empty() && idx < o.forced.size() && tap_.rows.size() >= (k + 1) * vocab) {
        const float* row = tap_.rows.data() + k * vocab;
        const int32_t want = o.forced[idx];
        const float mx = *std::max_element(row, row + vocab);
        double z = 0.0;
        for (size_t i = 0; i < vocab; ++i) z += std::exp(static_cast<double>(row[i] - mx));
        o.nll.push_back(-(static_cast<double>(row[want] - mx) - std::log(z)));
        o.agree += std::max_element(row, row + vocab) - row == want ? 1 : 0;
        r.token = want;
      }
      ++k;
    }
  }

  TapBackend tap_;
  worker::StepExecutor exec_;
  std::unique_ptr<scheduler::Batcher> batcher_;
  std::map<uint64_t, Output> outs_;
  int32_t max_held_ = 0;
  int64_t steps_ = 0;
};

inline double mean(const std::vector<double>& v, size_t from = 0, size_t to = SIZE_MAX) {
  to = std::min(to, v.size());
  if (from >= to) return 0.0;
  double s = 0.0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s / static_cast<double>(to - from);
}

}  // namespace tessera::kvtest
