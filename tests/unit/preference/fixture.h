// Shared set-up of the preference tests: the real stories260K model and tok512 tokenizer, a
// preference and a prompt, and a deliberately simple reference of DKI injection built directly
// on Engine::forward (prefill the preference, scale V of [0, P) by alpha in the pool, run the
// prompt from position P, greedy by argmax) — independent of PreferenceInjector and of
// generate_with_preference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "tessera/testing/paths.h"
#include "tessera/worker/engine.h"
#include "tessera/worker/preference.h"
#include "tessera/worker/preference_local.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::worker::testing {

inline constexpr int32_t kPage = 16;
inline constexpr int32_t kPages = 24;

inline std::unique_ptr<Engine> make_engine(const Model& model) {
  auto e = Engine::create(model, {.pool = {.num_pages = kPages, .page_size = kPage}, .threads = 1});
  EXPECT_TRUE(e.ok()) << e.error().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

class PreferenceFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = load_model(tessera::testing::shared_path("models/stories260K/stories260K.bin"));
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    model_ = std::move(m).value().release();
    auto t = load_tokenizer(tessera::testing::shared_path("models/stories260K/tok512.bin"));
    ASSERT_TRUE(t.ok()) << t.error().to_string();
    tok_ = std::move(t).value().release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete model_;
  }
  void SetUp() override {
    pref_ = tok_->encode("Lily loved her red ball. She played with it every day in the big green park with her dog Max.", true);
    prompt_ = tok_->encode("One day, Lily went", false);
    ASSERT_GT(pref_.size(), 20u);
    ASSERT_GT(prompt_.size(), 2u);
  }

  KvFill fill_for(const std::string& user, float alpha, bool with_tokens = true) const {
    KvFill f;
    f.blob_key = make_blob_key(user, preference_hash(pref_, model_->fingerprint));
    f.num_tokens = static_cast<int32_t>(pref_.size());
    f.alpha = alpha;
    if (with_tokens) f.tokens = pref_;
    return f;
  }

  // The ceil(P / page_size) consecutive pages from `first`.
  std::vector<int32_t> pages_at(int32_t first) const {
    std::vector<int32_t> out;
    for (size_t i = 0; i < (pref_.size() + kPage - 1) / kPage; ++i) out.push_back(first + static_cast<int32_t>(i));
    return out;
  }

  static GenerateRequest greedy(const std::vector<int32_t>& prompt, int32_t n) {
    GenerateRequest g;
    g.prompt = prompt;
    g.max_tokens = n;
    g.sampling.temperature = 0.0f;
    return g;
  }

  // Forward of `tokens` at [start, start + n) on pages 0.. of `e` (slot == position).
  static std::vector<float> run(Engine& e, const std::vector<int32_t>& tokens, int32_t start) {
    std::vector<int64_t> slots;
    for (size_t i = 0; i < tokens.size(); ++i) slots.push_back(start + static_cast<int64_t>(i));
    std::vector<int32_t> table;
    for (int32_t p = 0; p < (start + static_cast<int32_t>(tokens.size()) + kPage - 1) / kPage; ++p) table.push_back(p);
    const SeqInput in{.tokens = tokens, .start_pos = start, .block_table = table, .slot_mapping = slots, .want_logits = true};
    auto r = e.forward(std::span<const SeqInput>(&in, 1));
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    return r.ok() ? std::vector<float>(r->begin(), r->end()) : std::vector<float>{};
  }

  // The reference: greedy tokens, and the logits of the first step.
  struct RefRun {
    std::vector<int32_t> tokens;
    std::vector<float> first_logits;
  };
  RefRun reference(float alpha, int32_t n) const {
    auto e = make_engine(*model_);
    RefRun out;
    const int32_t P = static_cast<int32_t>(pref_.size());
    run(*e, pref_, 0);
    for (int32_t l = 0; l < e->pool().num_layers(); ++l)
      for (int32_t p = 0; p < P; ++p)
        for (int64_t i = 0; i < e->pool().token_floats(); ++i) e->pool().value(l, p)[i] *= alpha;
    std::vector<int32_t> step = prompt_;
    int32_t pos = P;
    for (int32_t k = 0; k < n; ++k) {
      std::vector<float> logits = run(*e, step, pos);
      if (k == 0) out.first_logits = logits;
      const int32_t tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      out.tokens.push_back(tok);
      pos += static_cast<int32_t>(step.size());
      step = {tok};
    }
    return out;
  }

  static inline Model* model_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
  std::vector<int32_t> pref_;
  std::vector<int32_t> prompt_;
};

// Normalized mean squared error: sum (a-b)^2 / sum b^2.
inline double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? num / den : num;
}

}  // namespace tessera::worker::testing
