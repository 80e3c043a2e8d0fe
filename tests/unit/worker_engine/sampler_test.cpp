// Sampler on hand-made logits: exact cut sets for top-k / top-p / min-p, exact penalties,
// log-probabilities, seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "tessera/worker/sampler.h"

#include "tessera/grammar/grammar.h"

namespace tessera::worker {
namespace {

// Logits whose softmax is exactly the given probabilities (log p).
std::vector<float> from_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double v : p) l.push_back(static_cast<float>(std::log(v)));
  return l;
}

// The set of tokens drawn over many samples (each Sampler call with a fresh logits copy).
std::set<int32_t> support(const SamplingParams& params, const std::vector<float>& logits, int draws = 4000) {
  Sampler s(params);
  std::set<int32_t> seen;
  for (int i = 0; i < draws; ++i) {
    auto l = logits;
    seen.insert(s.sample(l).token);
  }
  return seen;
}

const std::vector<double> kProbs = {0.05, 0.4, 0.25, 0.15, 0.1, 0.05};  // sorted: 1, 2, 3, 4, {0, 5}

TEST(Sampler, GreedyAndTopK1PickTheArgmax) {
  const auto logits = from_probs(kProbs);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams k1;
  k1.temperature = 5.0f;
  k1.top_k = 1;
  EXPECT_EQ(support(greedy, logits, 50), std::set<int32_t>{1});
  EXPECT_EQ(support(k1, logits, 50), std::set<int32_t>{1});
  // Ties go to the lowest id.
  std::vector<float> tie = {0.0f, 2.0f, 2.0f};
  EXPECT_EQ(Sampler(greedy).sample(tie).token, 1);
}

TEST(Sampler, TopKTopPMinPCutSetsAreExact) {
  const auto logits = from_probs(kProbs);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 3;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{1, 2, 3}));
  p.top_k = 0;
  p.top_p = 0.64f;  // 0.4 + 0.25 = 0.65 reaches the mass: {1, 2}
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{1, 2}));
  p.top_p = 0.66f;  // needs the third token
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{1, 2, 3}));
  p.top_p = 1.0f;
  p.min_p = 0.3f;  // keep p >= 0.12: {1, 2, 3}
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{1, 2, 3}));
  p.min_p = 0.24f;  // keep p >= 0.096: {1, 2, 3, 4}
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{1, 2, 3, 4}));
  p.min_p = 0.0f;
  EXPECT_EQ(support(p, logits), (std::set<int32_t>{0, 1, 2, 3, 4, 5}));
}

TEST(Sampler, DrawFrequenciesFollowTheDistribution) {
  const auto logits = from_probs(kProbs);
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 5;
  Sampler s(p);
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto l = logits;
    ++counts[s.sample(l).token];
  }
  for (size_t t = 0; t < kProbs.size(); ++t) {
    const double f = static_cast<double>(counts[static_cast<int32_t>(t)]) / n;
    // 5 standard deviations of a binomial proportion.
    EXPECT_NEAR(f, kProbs[t], 5 * std::sqrt(kProbs[t] * (1 - kProbs[t]) / n)) << t;
  }
}

// Untruncated temperature draws over a vocabulary of many of the sampler's blocks (the draw
// sums per block and walks one): frequencies of tokens on block edges and of the rest follow
// the softmax (5 standard deviations), and tokens at -inf (a whole block, the last ids, single
// ids next to likely ones) are never drawn.
TEST(Sampler, UntruncatedDrawOverALargeVocabularyFollowsTheSoftmax) {
  const int64_t n = 49152 + 77;
  std::vector<float> logits(static_cast<size_t>(n), 0.0f);
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> small(-2.0f, 0.0f);
  for (auto& l : logits) l = small(gen);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t i = 4096; i < 4096 + 512; ++i) logits[static_cast<size_t>(i)] = -inf;  // one whole block
  for (int64_t i = n - 100; i < n; ++i) logits[static_cast<size_t>(i)] = -inf;         // the last ids
  logits[510] = logits[1024] = -inf;
  const std::vector<int64_t> peaks = {511, 512, 1023, 1025, 40000};
  for (int64_t i : peaks) logits[static_cast<size_t>(i)] = 9.0f;
  SamplingParams p;
  p.temperature = 0.9f;
  p.seed = 99;
  // The softmax at temperature 0.9 (double precision reference).
  std::vector<double> prob(static_cast<size_t>(n));
  double z = 0.0;
  for (int64_t i = 0; i < n; ++i) z += prob[static_cast<size_t>(i)] = std::exp(static_cast<double>(logits[static_cast<size_t>(i)]) / 0.9);
  for (auto& v : prob) v /= z;
  Sampler s(p);
  std::map<int64_t, int> counts;
  const int draws = 6000;
  for (int d = 0; d < draws; ++d) {
    auto l = logits;
    const int32_t t = s.sample(l).token;
    ASSERT_TRUE(std::isfinite(logits[static_cast<size_t>(t)])) << "drew masked token " << t;
    ++counts[t];
  }
  double rest = 1.0;
  int rest_count = draws;
  for (int64_t i : peaks) {
    const double q = prob[static_cast<size_t>(i)];
    EXPECT_NEAR(static_cast<double>(counts[i]) / draws, q, 5 * std::sqrt(q * (1 - q) / draws)) << i;
    rest -= q;
    rest_count -= counts[i];
  }
  EXPECT_NEAR(static_cast<double>(rest_count) / draws, rest, 5 * std::sqrt(rest * (1 - rest) / draws));
}

TEST(Sampler, PenaltiesAreExact) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.logprobs = true;
  p.top_logprobs = 4;
  Sampler s(p);
  s.set_history(std::vector<int32_t>{0, 0, 2});
  s.accept(3);
  std::vector<float> logits = {4.0f, 1.0f, -2.0f, 3.0f};
  const auto out = s.sample(logits);
  // token 0 (twice): 4 / 2 - 0.5 - 0.25 * 2 = 1.0; token 2 (once): -2 * 2 - 0.5 - 0.25 = -4.75;
  // token 3 (once): 3 / 2 - 0.75 = 0.75; token 1 untouched.
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 1.0f);
  EXPECT_FLOAT_EQ(logits[2], -4.75f);
  EXPECT_FLOAT_EQ(logits[3], 0.75f);
  EXPECT_EQ(out.token, 0);  // tie 0/1 -> lowest id
  const double z = std::log(2 * std::exp(1.0) + std::exp(-4.75) + std::exp(0.75));
  EXPECT_NEAR(out.logprob, 1.0 - z, 1e-6);
  ASSERT_EQ(out.top.size(), 4u);
  EXPECT_EQ(out.top[0].token, 0);
  EXPECT_EQ(out.top[1].token, 1);
  EXPECT_EQ(out.top[2].token, 3);
  EXPECT_EQ(out.top[3].token, 2);
  double sum = 0;
  for (const auto& t : out.top) sum += std::exp(static_cast<double>(t.logprob));
  EXPECT_NEAR(sum, 1.0, 1e-6);  // all 4 tokens listed: the probabilities sum to 1
  EXPECT_NEAR(out.top[3].logprob, -4.75 - z, 1e-5);
}

TEST(Sampler, LogprobsIgnoreTemperatureAndTruncation) {
  const auto logits = from_probs(kProbs);
  SamplingParams p;
  p.temperature = 0.3f;
  p.top_k = 2;
  p.logprobs = true;
  p.top_logprobs = 6;
  Sampler s(p);
  auto l = logits;
  const auto out = s.sample(l);
  ASSERT_EQ(out.top.size(), 6u);
  double sum = 0;
  for (const auto& t : out.top) {
    sum += std::exp(static_cast<double>(t.logprob));
    EXPECT_NEAR(t.logprob, std::log(kProbs[static_cast<size_t>(t.token)]), 1e-6);
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_NEAR(out.logprob, std::log(kProbs[static_cast<size_t>(out.token)]), 1e-6);
}

TEST(Sampler, SameSeedSameSequence) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(static_cast<double>(i)));
  auto draw = [&](uint64_t seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) {
      auto l = logits;
      out.push_back(s.sample(l).token);
    }
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(Sampler, ValidationNamesTheField) {
  SamplingParams p;
  p.temperature = -1.0f;
  auto st = validate_sampling_params(p);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("temperature"), std::string::npos);
  p = {};
  p.top_logprobs = 21;
  EXPECT_FALSE(validate_sampling_params(p).ok());
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_FALSE(validate_sampling_params(p).ok());
  p = {};
  p.min_p = NAN;
  EXPECT_FALSE(validate_sampling_params(p).ok());
  EXPECT_TRUE(validate_sampling_params(SamplingParams{}).ok());
}

// With a grammar, only what it allows is ever drawn, the budget closes the value in time, and
// the history replays (a worker that lost the request's state rebuilds the same matcher).
TEST(Sampler, GrammarConstrainsEveryDrawAndClosesWithinTheBudget) {
  std::vector<std::string> vocab = {"<eos>", "{", "}", "\"", "\":", ",", "a", "bc", "1", "23", "[", "]", "true", " ",
                                    ":", "b", "c", "t", "r", "u", "e", "f", "a", "l", "s"};  // every byte it needs
  vocab[0] = "";  // a control token: no bytes
  auto tv = std::make_shared<const grammar::TokenVocabulary>(vocab);
  auto schema = grammar::compile_json_schema(R"({"type":"object","properties":{"a":{"type":"integer"},
      "bc":{"type":"array","items":{"type":"boolean"}}},"required":["a","bc"]})");
  ASSERT_TRUE(schema.ok()) << schema.error().message;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    p.grammar = "compiled above";
    p.grammar_end_tokens = {0};
    p.grammar_max_tokens = 30;
    Sampler s(p, *schema, tv.get());
    std::string text;
    std::vector<int32_t> history;
    for (int step = 0; step < p.grammar_max_tokens; ++step) {
      std::vector<float> logits(vocab.size(), 0.0f);
      logits[13] = 5.0f;  // the model loves whitespace, which the grammar never allows
      logits[9] = 3.0f;
      const int32_t t = s.sample(logits).token;
      s.accept(t);
      history.push_back(t);
      if (t == 0) break;
      ASSERT_NE(t, 13);
      text += vocab[static_cast<size_t>(t)];
    }
    grammar::Matcher m(*schema);
    EXPECT_TRUE(m.feed(text) && m.complete()) << "seed " << seed << ": " << text;
    // Replaying the history gives the same constrained distribution.
    Sampler replay(p, *schema, tv.get());
    replay.set_history(std::span<const int32_t>(history.data(), history.size() - 1));
    std::vector<float> logits(vocab.size(), 0.0f);
    const int32_t last = replay.sample(logits).token;
    if (history.back() == 0) {
      EXPECT_EQ(last, 0) << "complete: only the end token is left";
    }
  }
}

// A request resumed after k tokens (preempted, or migrated from a dead worker: the scheduler
// sends them as history) draws what the uninterrupted sampler draws from token k on, for every
// kind of choice that uses the RNG (plain and truncated), with penalties on.
TEST(Sampler, SetHistoryPutsTheRngWhereTheUninterruptedRunIs) {
  const std::vector<float> logits = from_probs({0.3, 0.25, 0.2, 0.15, 0.1});
  for (const bool truncated : {false, true}) {
    SamplingParams p;
    p.temperature = 0.9f;
    p.seed = 1234;
    p.presence_penalty = 0.3f;
    if (truncated) p.top_p = 0.9f;
    Sampler whole(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) {
      auto l = logits;
      out.push_back(whole.sample(l).token);
      whole.accept(out.back());
    }
    for (const size_t k : {size_t{1}, size_t{17}, size_t{39}}) {
      Sampler resumed(p);
      resumed.set_history(std::span<const int32_t>(out.data(), k));
      for (size_t i = k; i < out.size(); ++i) {
        auto l = logits;
        const int32_t t = resumed.sample(l).token;
        ASSERT_EQ(t, out[i]) << "truncated " << truncated << ", resumed after " << k << ", token " << i;
        resumed.accept(t);
      }
    }
  }
}

}  // namespace
}  // namespace tessera::worker
