// Waiting for a condition with a deadline — the one way tests wait (never a bare sleep standing
// in for synchronization).
//
//   ASSERT_TRUE(wait_until([&] { return held_pages() == 0; }, 5s)) << "pages never released";
//
// Threading: runs `pred` on the calling thread; pred must be safe to call repeatedly.
#pragma once

#include <chrono>
#include <cstdlib>
#include <thread>

namespace tessera::testing {

// Calls pred() until it returns true (true) or `timeout` passes (false; pred is called once more
// at the deadline). `poll` is the interval between calls, not a wait for the condition.
template <class Pred>
bool wait_until(Pred&& pred, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

// The factor by which a test multiplies a wall-clock bound that it asserts (a latency, a
// detection time: "within 2.5 s"), read once from TESSERA_TIMING_SCALE: 1 when unset or not a
// number in [1, 100]. tests/run.sh sets 4 for the ASan+UBSan step, whose processes run 2-5x
// slower. Timeouts of waits (wait_until) need no scaling: they are generous upper limits, not
// the assertion. Thread-safe.
inline double timing_scale() {
  static const double scale = [] {
    const char* v = std::getenv("TESSERA_TIMING_SCALE");
    if (v == nullptr || *v == '\0') return 1.0;
    char* end = nullptr;
    const double f = std::strtod(v, &end);
    return (end != nullptr && *end == '\0' && f >= 1.0 && f <= 100.0) ? f : 1.0;
  }();
  return scale;
}

// `bound` x timing_scale(): for EXPECT_LT(elapsed, scaled(...)).
inline double scaled(double bound) { return bound * timing_scale(); }
inline std::chrono::milliseconds scaled(std::chrono::milliseconds bound) {
  return std::chrono::milliseconds(static_cast<long long>(static_cast<double>(bound.count()) * timing_scale()));
}

}  // namespace tessera::testing
