// A fake worker for scheduler tests: executes StepPlans on a simulated page pool whose "K/V" is
// the (token, position) each slot was computed from, and samples deterministic tokens.
//
// It is the oracle of the batcher tests. For every sequence of every plan it checks that
//  - the plan is well formed (step_plan.h): slot_mapping follows the block table, the block
//    table covers [0, start_pos + tokens), page ids are in the pool, ids are unique;
//  - the tokens are the request's own tokens at those positions;
//  - every position before start_pos that the sequence attends to holds exactly that request's
//    token at that position (so sharing, copy-on-write, eviction and preemption never let a
//    sequence read someone else's or stale K/V); preference positions hold the fill marker;
//  - no slot is written twice in one plan and no page written by one sequence is read by another
//    in the same plan.
// Sampled token at position p of request r: a fixed hash of (r, p) modulo vocab, so a request
// resumed after preemption produces the same tokens.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/common/hash.h"
#include "tessera/common/step_plan.h"

namespace tessera::testing {

class FakeWorker {
 public:
  static constexpr int32_t kFillMarker = -1;

  FakeWorker(int32_t num_pages, int32_t page_size, int32_t vocab, int32_t eos_id, int32_t eos_one_in)
      : num_pages_(num_pages), page_size_(page_size), vocab_(vocab), eos_(eos_id), eos_one_in_(eos_one_in),
        slots_(static_cast<size_t>(num_pages) * static_cast<size_t>(page_size), Slot{}) {}

  // The request's positions before generation: preference placeholders (kFillMarker) + prompt.
  void expect(uint64_t id, std::vector<int32_t> key_tokens) { known_[id] = std::move(key_tokens); }

  int32_t token_for(uint64_t id, int32_t pos) const {
    const uint64_t h = mix64(id * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(pos));
    if (eos_one_in_ > 0 && h % static_cast<uint64_t>(eos_one_in_) == 0) return eos_;
    const auto t = static_cast<int32_t>((h >> 20) % static_cast<uint64_t>(vocab_ - 1));
    return t >= eos_ ? t + 1 : t;  // any token but EOS
  }

  // Executes the plan; problems are appended to errors() (tests assert it stays empty).
  StepResult execute(const StepPlan& plan) {
    StepResult r;
    r.step_id = plan.step_id;
    for (const PageCopy& c : plan.copies) {
      if (!page_ok(c.src) || !page_ok(c.dst)) continue;
      for (int32_t i = 0; i < page_size_; ++i) slot(c.dst, i) = slot(c.src, i);
    }
    for (const KvFill& f : plan.fills) {
      if (static_cast<int32_t>(f.pages.size()) != (f.num_tokens + page_size_ - 1) / page_size_) {
        fail(plan, f.request_id, "fill has the wrong number of pages");
        continue;
      }
      for (int32_t p = 0; p < f.num_tokens; ++p) {
        if (page_ok(f.pages[static_cast<size_t>(p / page_size_)])) {
          slot(f.pages[static_cast<size_t>(p / page_size_)], p % page_size_) = Slot{kFillMarker, p};
        }
      }
    }
    std::set<uint64_t> ids;
    std::map<int32_t, uint64_t> written_pages;  // page -> writer
    std::map<int32_t, std::set<uint64_t>> read_pages;
    for (const SeqPlan& s : plan.seqs) {
      if (!ids.insert(s.request_id).second) fail(plan, s.request_id, "request twice in one plan");
      for (uint64_t rel : plan.released) {
        if (rel == s.request_id) fail(plan, s.request_id, "request both released and planned");
      }
      check_seq(plan, s);
      for (int32_t p : s.block_table) read_pages[p].insert(s.request_id);
      for (int64_t sl : s.slot_mapping) {
        const auto page = static_cast<int32_t>(sl / page_size_);
        auto [it, fresh] = written_pages.emplace(page, s.request_id);
        if (!fresh && it->second != s.request_id) fail(plan, s.request_id, "page " + std::to_string(page) + " written by two sequences");
      }
    }
    for (const auto& [page, writer] : written_pages) {
      if (read_pages[page].size() > 1) fail(plan, writer, "writes page " + std::to_string(page) + " that another sequence reads");
    }
    // Compute: write K/V, then sample.
    for (const SeqPlan& s : plan.seqs) {
      for (size_t i = 0; i < s.tokens.size() && i < s.slot_mapping.size(); ++i) {
        if (s.slot_mapping[i] >= 0 && s.slot_mapping[i] < static_cast<int64_t>(slots_.size())) {
          slots_[static_cast<size_t>(s.slot_mapping[i])] = Slot{s.tokens[i], s.start_pos + static_cast<int32_t>(i)};
        }
      }
      if (s.sample) {
        const int32_t pos = s.start_pos + static_cast<int32_t>(s.tokens.size());
        const int32_t tok = token_for(s.request_id, pos);
        auto& k = known_[s.request_id];
        if (static_cast<int32_t>(k.size()) == pos) {
          k.push_back(tok);
        } else if (static_cast<int32_t>(k.size()) < pos || k[static_cast<size_t>(pos)] != tok) {
          fail(plan, s.request_id, "sampling position " + std::to_string(pos) + " out of step with history");
        }
        r.results.push_back(SeqResult{s.request_id, tok, -0.5f, {}});
      }
    }
    ++steps_;
    return r;
  }

  // K/V offload tests: a page's simulated K/V as (token, position) per slot, and writing such a
  // copy back into a page (a reload from the kvstore).
  std::vector<std::pair<int32_t, int32_t>> read_page(int32_t page) const {
    std::vector<std::pair<int32_t, int32_t>> out;
    for (int32_t i = 0; i < page_size_; ++i) {
      const Slot& s = slots_[static_cast<size_t>(page) * static_cast<size_t>(page_size_) + static_cast<size_t>(i)];
      out.emplace_back(s.token, s.pos);
    }
    return out;
  }
  void write_page(int32_t page, const std::vector<std::pair<int32_t, int32_t>>& data) {
    for (int32_t i = 0; i < page_size_ && i < static_cast<int32_t>(data.size()); ++i) {
      slot(page, i) = Slot{data[static_cast<size_t>(i)].first, data[static_cast<size_t>(i)].second};
    }
  }

  const std::vector<std::string>& errors() const { return errors_; }
  int64_t steps() const { return steps_; }

 private:
  struct Slot {
    int32_t token = -2;  // -2: never written
    int32_t pos = -1;
  };
  Slot& slot(int32_t page, int32_t off) { return slots_[static_cast<size_t>(page) * static_cast<size_t>(page_size_) + static_cast<size_t>(off)]; }
  bool page_ok(int32_t p) const { return p >= 0 && p < num_pages_; }

  void fail(const StepPlan& plan, uint64_t id, const std::string& what) {
    if (errors_.size() < 20) errors_.push_back("step " + std::to_string(plan.step_id) + " req " + std::to_string(id) + ": " + what);
  }

  void check_seq(const StepPlan& plan, const SeqPlan& s) {
    auto kit = known_.find(s.request_id);
    if (kit == known_.end()) return fail(plan, s.request_id, "unknown request");
    const std::vector<int32_t>& k = kit->second;
    const int32_t n = static_cast<int32_t>(s.tokens.size());
    const int32_t end = s.start_pos + n;
    if (n == 0 || s.start_pos < 0) return fail(plan, s.request_id, "empty or negative chunk");
    if (static_cast<int32_t>(s.block_table.size()) != (end + page_size_ - 1) / page_size_) {
      return fail(plan, s.request_id, "block table does not cover exactly [0, end)");
    }
    std::set<int32_t> distinct(s.block_table.begin(), s.block_table.end());
    if (distinct.size() != s.block_table.size()) return fail(plan, s.request_id, "page twice in a block table");
    for (int32_t p : s.block_table) {
      if (!page_ok(p)) return fail(plan, s.request_id, "page out of pool");
    }
    if (static_cast<int32_t>(s.slot_mapping.size()) != n) return fail(plan, s.request_id, "slot mapping size");
    for (int32_t i = 0; i < n; ++i) {
      const int32_t pos = s.start_pos + i;
      const int64_t want = static_cast<int64_t>(s.block_table[static_cast<size_t>(pos / page_size_)]) * page_size_ + pos % page_size_;
      if (s.slot_mapping[static_cast<size_t>(i)] != want) return fail(plan, s.request_id, "slot mapping formula");
      if (pos >= static_cast<int32_t>(k.size()) || k[static_cast<size_t>(pos)] != s.tokens[static_cast<size_t>(i)]) {
        return fail(plan, s.request_id, "token at position " + std::to_string(pos) + " is not the request's");
      }
    }
    for (int32_t pos = 0; pos < s.start_pos; ++pos) {
      const Slot& sl = slot(s.block_table[static_cast<size_t>(pos / page_size_)], pos % page_size_);
      if (sl.pos != pos || sl.token != k[static_cast<size_t>(pos)]) {
        return fail(plan, s.request_id, "reads wrong K/V at position " + std::to_string(pos) + " (slot holds token " +
                                            std::to_string(sl.token) + "@" + std::to_string(sl.pos) + ", want " +
                                            std::to_string(k[static_cast<size_t>(pos)]) + ")");
      }
    }
  }

  int32_t num_pages_, page_size_, vocab_, eos_, eos_one_in_;
  std::vector<Slot> slots_;
  std::unordered_map<uint64_t, std::vector<int32_t>> known_;
  std::vector<std::string> errors_;
  int64_t steps_ = 0;
};

}  // namespace tessera::testing
