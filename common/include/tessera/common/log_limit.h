// Rate-limited log lines, for what a peer can trigger at will (malformed or unexpected
// messages): at most `burst` lines per `window` per limiter; the first line written after a
// suppressed stretch starts with "(N similar lines suppressed) ". So 60,000 garbage frames give
// a few dozen lines, not megabytes (issue 18). Lines are still capped and escaped by log.h.
//
//   static log::RateLimit bad_frames;  // one per call site (or per kind of line)
//   TS_LOG_LIMITED(kWarn, bad_frames) << "frontend message: " << error;
//
// Thread-safe (one mutex per limiter, taken only when the level is enabled).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "tessera/common/log.h"

namespace tessera::log {

class RateLimit {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RateLimit(int burst = 10, std::chrono::milliseconds window = std::chrono::seconds(10))
      : burst_(burst), window_(window) {}

  // True when a line may be written now; then *suppressed = lines dropped since the last one
  // written (0 when none).
  bool allow(uint64_t* suppressed, Clock::time_point now = Clock::now()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (now - window_start_ >= window_) {
      window_start_ = now;
      written_ = 0;
    }
    if (written_ >= burst_) {
      ++dropped_;
      return false;
    }
    ++written_;
    *suppressed = dropped_;
    dropped_ = 0;
    return true;
  }

 private:
  std::mutex mu_;
  const int burst_;
  const std::chrono::milliseconds window_;
  Clock::time_point window_start_{};  // GUARDED_BY(mu_)
  int written_ = 0;                   // GUARDED_BY(mu_): lines written in this window
  uint64_t dropped_ = 0;              // GUARDED_BY(mu_): since the last line written
};

inline std::string suppressed_note(uint64_t n) {
  return n == 0 ? std::string() : "(" + std::to_string(n) + " similar lines suppressed) ";
}

}  // namespace tessera::log

// Like TS_LOG, but only when `limiter` (a log::RateLimit) allows a line.
#define TS_LOG_LIMITED(lvl, limiter)                                                                    \
  if (uint64_t ts_log_suppressed_ = 0;                                                                  \
      !::tessera::log::enabled(::tessera::log::lvl) || !(limiter).allow(&ts_log_suppressed_))          \
    ;                                                                                                   \
  else                                                                                                  \
    ::tessera::log::Line(::tessera::log::lvl, __FILE__, __LINE__).stream()                              \
        << ::tessera::log::suppressed_note(ts_log_suppressed_)
