// Waiting for a condition with a deadline (never a bare sleep standing in for synchronization).
#pragma once

#include <chrono>
#include <thread>

namespace tessera::kvstore::testing {

// Polls `cond` every few milliseconds until it holds or `deadline` passes; returns its last value.
template <class F>
bool wait_for(F&& cond, std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (true) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace tessera::kvstore::testing
