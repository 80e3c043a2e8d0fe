// Waiting for a condition with a deadline — the one way tests wait (never a bare sleep standing
// in for synchronization).
//
//   ASSERT_TRUE(wait_until([&] { return held_pages() == 0; }, 5s)) << "pages never released";
//
// Threading: runs `pred` on the calling thread; pred must be safe to call repeatedly.
#pragma once

#include <chrono>
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

}  // namespace tessera::testing
