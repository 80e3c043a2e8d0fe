// The tiered codec's ratio at the error bound (attention output relative error <= 1e-2,
// issue 15 item 4) on real K/V of two preferences: for each setting, the largest step whose
// error stays within the bound (bisection over the step), and the ratio against f16 there, for
// the preference-only measure (the continuations' model queries attend over the decoded blob
// alone) and the full-context one (they attend over it and their own exact positions, as the
// model does). The table of docs/BENCHMARKS.md "Codec ratio and error on real K/V"; asserted: the
// measured ratios with ~3 % margin, and that the decay beats the uniform step on the longer
// preference. (No setting reaches the 3.5x: docs/kv.md says why.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "real_kv_fixture.h"

namespace tessera::kvstore {
namespace {

using testing::to_f16;
using RealKvCurve = testing::RealKvFixture;

constexpr const char* kLongStory =
    "Once upon a time, there was a little girl named Sue. Sue had a big blue ball that she loved very much. "
    "Every day she played with the ball in the garden with her brother Max. One day, the ball rolled into "
    "the pond. Sue was sad and began to cry. Max said, \"Do not cry, Sue. I will help you.\" He found a long "
    "stick and tried to reach the ball. The ball was too far away. Then a big duck swam to the ball and "
    "pushed it back to the shore with its beak. Sue was so happy. She said thank you to the duck and gave "
    "it some bread. From that day on, Sue, Max and the duck were best friends and they played together in "
    "the sun every day.";

struct Setting {
  const char* name;
  uint32_t recent;
  float decay;
};

// Ratio vs f16 at the largest step (of 14 bisection steps over [0.002, 1]) whose error <= 1e-2.
template <class Err>
std::pair<double, double> ratio_at_bound(const PackedKv& f16, const Setting& s, Err&& err) {
  double lo = std::log(0.002), hi = 0.0, ratio = 0.0, step = 0.0;
  for (int it = 0; it < 14; ++it) {
    const double mid = (lo + hi) / 2;
    const EncodeOptions o{.codec = Codec::kTiered, .tiered_step = static_cast<float>(std::exp(mid)), .tiered_recent = s.recent,
                          .tiered_decay = s.decay};
    const std::string blob = encode_blob(f16, o).value();
    if (err(decode_blob(blob).value()) > 0.01) {
      hi = mid;
    } else {
      lo = mid;
      ratio = 2.0 * static_cast<double>(f16.region_bytes()) / static_cast<double>(blob.size());
      step = std::exp(mid);
    }
  }
  return {ratio, step};
}

TEST_F(RealKvCurve, TieredRatioAtTheErrorBound) {
  struct KvSet {
    const char* text;  // nullptr: the fixture's preference
    std::vector<const char*> continuations;
    double min_uniform[2], min_decay[2];  // preference-only, full context; measured - ~3 %
  };
  const KvSet sets[] = {
      {nullptr, {"One day, Lily went to", "Tim the bird", "It started to rain and"}, {1.86, 2.24}, {1.89, 2.26}},
      {kLongStory, {"The next day, Max", "The duck was", "Sue and her brother went to"}, {1.98, 2.44}, {2.28, 2.60}},
  };
  const Setting settings[] = {{"uniform (recent 8, decay 0)", 8, 0.0f}, {"decay 1.5 (recent 0)", 0, 1.5f}};
  const auto n_heads = static_cast<uint32_t>(model_->config().n_heads);
  std::printf("| K/V | setting | measure | step at 1e-2 | ratio vs f16 |\n");
  for (const KvSet& set : sets) {
    if (set.text != nullptr) set_preference(set.text);
    const auto pr = probe(set.continuations);
    const PackedKv f16 = to_f16(exact_);
    double got[2][2] = {};
    for (int si = 0; si < 2; ++si) {
      for (int full = 0; full < 2; ++full) {
        const auto [ratio, step] = ratio_at_bound(f16, settings[si], [&](const PackedKv& back) {
          return full == 1 ? testing::attention_output_rel_error_full(f16, back, pr.conts, n_heads)
                           : testing::attention_output_rel_error_real(f16, back, pr.queries, pr.n_queries, n_heads);
        });
        got[si][full] = ratio;
        std::printf("| stories260K, %zu tokens | %s | %s | %.4f | %.2f |\n", pref_.size(), settings[si].name,
                    full == 1 ? "full context" : "preference only", step, ratio);
        EXPECT_GE(ratio, si == 0 ? set.min_uniform[full] : set.min_decay[full]) << pref_.size() << " " << settings[si].name;
        EXPECT_LT(ratio, 3.5) << "the issue's target reached: update docs/kv.md";
      }
    }
    if (set.text != nullptr) {  // the longer preference: the decay gains >= 10 % preference-only
      EXPECT_GE(got[1][0], 1.1 * got[0][0]);
    }
  }
}

}  // namespace
}  // namespace tessera::kvstore
