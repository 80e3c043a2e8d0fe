// get_many's in-flight budget (kvstore/include/tessera/kvstore/inflight_budget.h): exact budgets
// from given RTT and delivery-rate samples — 2 x the bandwidth-delay product of the least RTT and
// the largest rate of the recent samples, plus the last mean value size, clamped to [min, max];
// fixed when not auto; the option text "auto|N".
#include "tessera/kvstore/inflight_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace tessera::kvstore {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;

TEST(InflightBudget, StartsAtTheFloorUntilBothRttAndRateAreKnown) {
  InflightBudget b({.auto_tune = true, .min_bytes = 64 * KiB, .max_bytes = 8 * MiB});
  EXPECT_EQ(b.bytes(), 64 * KiB);
  b.add_delivery_sample(1 * MiB, 10, milliseconds(10));  // no RTT yet: cannot tell a burst, dropped
  EXPECT_EQ(b.bytes(), 64 * KiB);
  EXPECT_EQ(b.snapshot().rate_bytes_per_s, 0.0);
  b.add_rtt_sample(milliseconds(1));
  EXPECT_EQ(b.bytes(), 64 * KiB);
  EXPECT_DOUBLE_EQ(b.snapshot().rtt_s, 1e-3);
}

TEST(InflightBudget, IsTwiceTheBandwidthDelayProductPlusAValueClamped) {
  InflightBudget b({.auto_tune = true, .min_bytes = 64 * KiB, .max_bytes = 8 * MiB});
  b.add_rtt_sample(milliseconds(1));
  b.add_delivery_sample(1000000, 10, milliseconds(4));  // 250 MB/s x 1 ms x 2 + 100 000 bytes
  EXPECT_EQ(b.bytes(), 600000u);
  EXPECT_DOUBLE_EQ(b.snapshot().rate_bytes_per_s, 250e6);
  EXPECT_EQ(b.snapshot().mean_value_bytes, 100000u);
  b.add_delivery_sample(100000000, 1000, milliseconds(20));  // 5 GB/s: 10 MB, capped
  EXPECT_EQ(b.bytes(), 8 * MiB);
  InflightBudget fast({.auto_tune = true, .min_bytes = 256 * KiB, .max_bytes = 8 * MiB});
  fast.add_rtt_sample(microseconds(40));                   // loopback
  fast.add_delivery_sample(1000000, 10, microseconds(500));  // 2 GB/s x 40 us x 2 + 100 000 = 260 000: the floor
  EXPECT_EQ(fast.bytes(), 256 * KiB);
}

// Window-limited: a budget of W per round trip delivers W / RTT, so the next budget is 2 W (plus
// a value) — it doubles per call up to the cap.
TEST(InflightBudget, DoublesWhileThePipelineIsTheLimit) {
  InflightBudget b({.auto_tune = true, .min_bytes = 256 * KiB, .max_bytes = 4 * MiB});
  b.add_rtt_sample(milliseconds(2));
  std::vector<uint64_t> seen;
  for (int call = 0; call < 6; ++call) {
    const uint64_t w = b.bytes();
    seen.push_back(w);
    b.add_delivery_sample(8 * w, 8 * w / (64 * KiB), milliseconds(16));  // 8 round trips of w, 64 KiB values
  }
  EXPECT_EQ(seen, (std::vector<uint64_t>{256 * KiB, 576 * KiB, 1216 * KiB, 2496 * KiB, 4 * MiB, 4 * MiB}));
}

TEST(InflightBudget, LeastRttAndLargestRateOfTheRecentSamples) {
  InflightBudget b({.auto_tune = true, .min_bytes = 1 * KiB, .max_bytes = 1024 * MiB});
  for (int ms : {3, 1, 2}) b.add_rtt_sample(milliseconds(ms));
  EXPECT_DOUBLE_EQ(b.snapshot().rtt_s, 1e-3);
  b.add_delivery_sample(2000000, 20, milliseconds(20));  // 100 MB/s, values of 100 000
  EXPECT_EQ(b.bytes(), 300000u);
  b.add_delivery_sample(1000000, 20, milliseconds(20));  // 50 MB/s: the max stays; values of 50 000
  EXPECT_EQ(b.bytes(), 250000u);
  // The 1 ms sample ages out after kRttSamples newer ones; the 100 MB/s after kRateSamples.
  for (int i = 0; i < InflightBudget::kRttSamples; ++i) b.add_rtt_sample(milliseconds(4));
  EXPECT_DOUBLE_EQ(b.snapshot().rtt_s, 4e-3);
  for (int i = 0; i < InflightBudget::kRateSamples; ++i) b.add_delivery_sample(1000000, 10, milliseconds(40));
  EXPECT_DOUBLE_EQ(b.snapshot().rate_bytes_per_s, 25e6);
  EXPECT_EQ(b.bytes(), 300000u);  // 2 x 25 MB/s x 4 ms + 100 000
}

// A busy shard's get_many first-reply samples (which include the first value's transfer) never
// push the health check's PINGs out of the min filter: each source ages out only by its own.
TEST(InflightBudget, FirstReplySamplesDoNotEvictPings) {
  InflightBudget b({.auto_tune = true, .min_bytes = 1 * KiB, .max_bytes = 1024 * MiB});
  b.add_rtt_sample(milliseconds(1), RttSource::kPing);
  for (int i = 0; i < 4 * InflightBudget::kRttSamples; ++i) b.add_rtt_sample(milliseconds(5), RttSource::kFirstReply);
  EXPECT_DOUBLE_EQ(b.snapshot().rtt_s, 1e-3);
  b.add_delivery_sample(2000000, 20, milliseconds(20));  // 100 MB/s: 2 x 100 MB/s x 1 ms + 100 000
  EXPECT_EQ(b.bytes(), 300000u);
  // A first reply faster than every PING is still the minimum (both are upper bounds).
  b.add_rtt_sample(microseconds(500), RttSource::kFirstReply);
  EXPECT_DOUBLE_EQ(b.snapshot().rtt_s, 5e-4);
  // It ages out after kRttSamples newer first replies, whatever the PINGs do; the 1 ms PING after
  // kRttSamples newer PINGs.
  for (int i = 0; i < InflightBudget::kRttSamples; ++i) b.add_rtt_sample(milliseconds(3), RttSource::kPing);
  EXPECT_DOUBLE_EQ(b.snapshot().rtt_s, 5e-4);
  for (int i = 0; i < InflightBudget::kRttSamples; ++i) b.add_rtt_sample(milliseconds(5), RttSource::kFirstReply);
  EXPECT_DOUBLE_EQ(b.snapshot().rtt_s, 3e-3);
}

// Replies read in less than half an RTT were waiting in the socket buffer: no rate sample.
TEST(InflightBudget, DropsBurstsShorterThanHalfAnRtt) {
  InflightBudget b({.auto_tune = true, .min_bytes = 64 * KiB, .max_bytes = 8 * MiB});
  b.add_rtt_sample(milliseconds(2));
  b.add_delivery_sample(4 * MiB, 4, microseconds(999));
  EXPECT_EQ(b.snapshot().rate_bytes_per_s, 0.0);
  EXPECT_EQ(b.snapshot().mean_value_bytes, 1 * MiB);  // kept
  EXPECT_EQ(b.bytes(), 64 * KiB);
  b.add_delivery_sample(1000000, 10, milliseconds(1));  // exactly half: kept (1 GB/s x 2 ms x 2 + 100 000)
  EXPECT_EQ(b.bytes(), 4100000u);
}

TEST(InflightBudget, FixedIgnoresTheEstimatesButKeepsThem) {
  for (uint64_t fixed : {uint64_t{0}, 256 * KiB, 2 * MiB}) {
    InflightBudget b({.auto_tune = false, .fixed_bytes = fixed, .min_bytes = 64 * KiB, .max_bytes = 1 * MiB});
    b.add_rtt_sample(milliseconds(2));
    b.add_delivery_sample(100000000, 100, milliseconds(10));
    EXPECT_EQ(b.bytes(), fixed);
    EXPECT_DOUBLE_EQ(b.snapshot().rtt_s, 2e-3);
    EXPECT_DOUBLE_EQ(b.snapshot().rate_bytes_per_s, 1e10);
    EXPECT_EQ(b.snapshot().budget_bytes, fixed);
  }
}

TEST(InflightBudget, ParsesAutoOrKiB) {
  EXPECT_FALSE(parse_inflight_kb("auto").value().has_value());
  EXPECT_EQ(parse_inflight_kb("0").value(), std::optional<uint64_t>(0));
  EXPECT_EQ(parse_inflight_kb("2048").value(), std::optional<uint64_t>(2 * MiB));
  EXPECT_EQ(parse_inflight_kb("1048576").value(), std::optional<uint64_t>(uint64_t{1} << 30));
  for (const char* bad : {"", "Auto", "-1", "1048577", "256k", " 256", "fast"}) {
    auto r = parse_inflight_kb(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("'" + std::string(bad) + "'"), std::string::npos) << r.error().message;
  }
}

// get_many threads and the health thread feed one estimator at once (run under TSan in CI's
// sanitizer build): the budget stays within [min, max] throughout.
TEST(InflightBudget, ConcurrentSamplesStayWithinBounds) {
  InflightBudget b({.auto_tune = true, .min_bytes = 128 * KiB, .max_bytes = 2 * MiB});
  std::vector<std::thread> threads;
  std::atomic<bool> out_of_bounds{false};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        if (t == 0) {
          b.add_rtt_sample(microseconds(100 + i % 900));
        } else {
          b.add_delivery_sample(static_cast<uint64_t>(1000 + 997 * i * t), 1 + i % 7, microseconds(50 + i % 3000));
        }
        const uint64_t now = b.bytes();
        if (now < 128 * KiB || now > 2 * MiB) out_of_bounds = true;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(out_of_bounds.load());
  EXPECT_GT(b.snapshot().rtt_s, 0.0);
}

}  // namespace
}  // namespace tessera::kvstore
