// Prompt log-probabilities (SeqPlan::prompt_logprobs, OpenAI echo + logprobs): a prompt scored
// chunk by chunk, batched with another sequence, against the contiguous reference forward's
// logits of the whole prompt (reference_forward: every position's row). Tolerance 1e-4 absolute
// on log-probabilities (the engine and the reference differ only in summation order; see
// equivalence_test.cpp, measured ~1e-6 on these models).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "synth_model.h"
#include "tessera/worker/engine.h"
#include "tessera/worker/step_executor.h"

namespace tessera::worker {
namespace {

using testing::SynthModel;
using testing::SynthSpec;

constexpr int32_t kPageSize = 4;

SeqPlan chunk(uint64_t id, const std::vector<int32_t>& all, int32_t start, int32_t count, std::vector<int32_t> table) {
  SeqPlan s;
  s.request_id = id;
  s.tokens.assign(all.begin() + start, all.begin() + start + count);
  s.start_pos = start;
  s.block_table = std::move(table);
  for (int32_t p = start; p < start + count; ++p)
    s.slot_mapping.push_back(static_cast<int64_t>(s.block_table[static_cast<size_t>(p / kPageSize)]) * kPageSize + p % kPageSize);
  s.sampling.temperature = 0.0f;
  return s;
}

// log-softmax of one reference row at `token`.
double ref_logprob(const float* row, int32_t vocab, int32_t token) {
  double mx = row[0];
  for (int32_t t = 1; t < vocab; ++t) mx = std::max(mx, static_cast<double>(row[t]));
  double z = 0.0;
  for (int32_t t = 0; t < vocab; ++t) z += std::exp(row[t] - mx);
  return row[token] - (mx + std::log(z));
}

TEST(PromptLogprobs, ChunkedScoresMatchTheFullPrefillLogits) {
  SynthModel model(SynthSpec{});
  const int32_t vocab = model.config().vocab_size;
  auto e = Engine::create(model, {.pool = {.num_pages = 16, .page_size = kPageSize}, .threads = 2, .isa = std::nullopt});
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  Engine& engine = **e;
  const std::vector<std::string> caps = engine.executor().capabilities();
  EXPECT_NE(std::find(caps.begin(), caps.end(), "prompt_logprobs"), caps.end());

  const std::vector<int32_t> prompt = {5, 17, 3, 88, 42, 42, 7, 61, 19, 2, 90};  // 11 tokens: chunks 4 + 4 + 3
  const std::vector<int32_t> other = {9, 8, 7, 6, 5};
  auto ref = reference_forward(model, prompt);
  ASSERT_TRUE(ref.ok()) << ref.error().to_string();
  const std::vector<int32_t> table = {3, 9, 1};  // 12 positions
  const std::vector<int32_t> other_table = {4, 5};
  constexpr int32_t kTop = 3;

  std::vector<float> got(prompt.size(), NAN);  // by position
  std::vector<std::vector<TokenLogprob>> got_top(prompt.size());
  int32_t first_token = -1;
  float first_logprob = 0.0f;
  for (int32_t start = 0; start < 11; start += 4) {
    const int32_t n = std::min(4, 11 - start);
    StepPlan plan;
    plan.step_id = static_cast<uint64_t>(start + 1);
    // A plain sequence in the same batch (its row must still be the one sampled).
    if (start == 0) {
      SeqPlan o = chunk(2, other, 0, 5, other_table);
      o.sample = true;
      plan.seqs.push_back(o);
    }
    SeqPlan s = chunk(1, prompt, start, n, table);
    s.prompt_logprobs = true;
    s.sampling.prompt_logprobs = kTop;
    s.sampling.logprobs = true;
    s.next_token = start + n < 11 ? prompt[static_cast<size_t>(start + n)] : -1;
    s.sample = start + n == 11;
    plan.seqs.push_back(s);
    auto r = engine.execute(plan);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    ASSERT_EQ(r->prompt_logprobs.size(), 1u);
    const PromptLogprobs& pl = r->prompt_logprobs[0];
    EXPECT_EQ(pl.request_id, 1u);
    EXPECT_EQ(pl.first_pos, start + 1);
    // Every row scores its next token; the last chunk's last row is sampled instead.
    EXPECT_EQ(pl.logprobs.size(), static_cast<size_t>(s.next_token >= 0 ? n : n - 1));
    ASSERT_EQ(pl.top.size(), pl.logprobs.size());
    for (size_t i = 0; i < pl.logprobs.size(); ++i) {
      got[static_cast<size_t>(pl.first_pos) + i] = pl.logprobs[i];
      got_top[static_cast<size_t>(pl.first_pos) + i] = pl.top[i];
    }
    if (s.sample) {
      ASSERT_EQ(r->results.size(), 1u);
      first_token = r->results[0].token;
      first_logprob = r->results[0].logprob;
    } else if (start == 0) {
      ASSERT_EQ(r->results.size(), 1u);
      EXPECT_EQ(r->results[0].request_id, 2u);
    }
  }
  for (size_t p = 1; p < prompt.size(); ++p) {
    const float* row = ref->data() + (p - 1) * static_cast<size_t>(vocab);
    EXPECT_NEAR(got[p], ref_logprob(row, vocab, prompt[p]), 1e-4) << "position " << p;
    // The alternatives: the reference row's most likely tokens, in order.
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [row](int32_t a, int32_t b) { return row[a] > row[b]; });
    ASSERT_EQ(got_top[p].size(), static_cast<size_t>(kTop)) << "position " << p;
    for (int32_t k = 0; k < kTop; ++k) {
      EXPECT_EQ(got_top[p][static_cast<size_t>(k)].token, order[static_cast<size_t>(k)]) << "position " << p << " rank " << k;
      EXPECT_NEAR(got_top[p][static_cast<size_t>(k)].logprob, ref_logprob(row, vocab, order[static_cast<size_t>(k)]), 1e-4);
    }
  }
  // The sampled first token comes from the last prompt row, as without scoring.
  const float* last = ref->data() + 10 * static_cast<size_t>(vocab);
  EXPECT_EQ(first_token, static_cast<int32_t>(std::max_element(last, last + vocab) - last));
  EXPECT_NEAR(first_logprob, ref_logprob(last, vocab, first_token), 1e-4);
}

TEST(PromptLogprobs, BadPlansAreRefused) {
  SynthModel model(SynthSpec{});
  auto e = Engine::create(model, {.pool = {.num_pages = 4, .page_size = kPageSize}, .threads = 1, .isa = std::nullopt});
  ASSERT_TRUE(e.ok());
  StepPlan plan;
  SeqPlan s = chunk(1, {1, 2, 3}, 0, 3, {0});
  s.prompt_logprobs = true;
  s.sampling.prompt_logprobs = 2;
  s.next_token = model.config().vocab_size;  // outside the vocabulary
  plan.seqs.push_back(s);
  auto r = (*e)->execute(plan);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kOutOfRange);
  EXPECT_NE(r.error().message.find("next_token"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace tessera::worker
