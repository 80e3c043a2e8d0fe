// Peer liveness: one rule for every heartbeat side (frontend -> schedulers, scheduler ->
// workers and frontends, worker -> scheduler). A peer is alive while something was heard from
// it within `dead_after`; a heartbeat is due every `interval`.
//
// Usage:
//   PeerLiveness link({.interval = 500ms, .dead_after = 3000ms});
//   link.heard(now);                          // on every message from the peer
//   if (link.beat_due(now)) { send(...); link.beat_sent(now); }
//   if (link.check_dead(now)) fail_everything_of(peer);   // true exactly once per death
//
// Not thread-safe: owned by the one thread that runs the peer's socket (each service keeps
// its peers on its event-loop thread). Invariant: dead_after > interval >= 1 ms (validate()).
// A new PeerLiveness is alive and due to beat at once (the peer is given `dead_after` from
// construction to answer).
#pragma once

#include <chrono>

#include "tessera/common/result.h"

namespace tessera {

struct LivenessConfig {
  std::chrono::milliseconds interval{500};     // heartbeat period
  std::chrono::milliseconds dead_after{3000};  // silence after which the peer is dead

  // kInvalidArgument unless interval >= 1 ms and dead_after > interval. `what` names the
  // options in the message (e.g. "--heartbeat-ms/--worker-dead-ms").
  Status validate(const char* what) const;
};

class PeerLiveness {
 public:
  using Clock = std::chrono::steady_clock;

  explicit PeerLiveness(LivenessConfig config, Clock::time_point now = Clock::now())
      : config_(config), last_heard_(now), next_beat_(now) {}

  // Something arrived from the peer: alive again (also after check_dead() said dead).
  void heard(Clock::time_point now) {
    last_heard_ = now;
    alive_ = true;
  }
  bool alive() const { return alive_; }
  Clock::time_point last_heard() const { return last_heard_; }
  // Silence so far, in milliseconds.
  double silent_ms(Clock::time_point now) const {
    return std::chrono::duration<double, std::milli>(now - last_heard_).count();
  }

  // True exactly once when the peer goes from alive to dead (silent for more than dead_after);
  // false while it stays dead or alive.
  bool check_dead(Clock::time_point now) {
    if (!alive_ || now - last_heard_ <= config_.dead_after) return false;
    alive_ = false;
    return true;
  }

  bool beat_due(Clock::time_point now) const { return now >= next_beat_; }
  void beat_sent(Clock::time_point now) { next_beat_ = now + config_.interval; }
  // Time until the next beat is due (0 when due): a poll timeout.
  std::chrono::milliseconds until_beat(Clock::time_point now) const {
    if (now >= next_beat_) return std::chrono::milliseconds(0);
    return std::chrono::ceil<std::chrono::milliseconds>(next_beat_ - now);
  }

  const LivenessConfig& config() const { return config_; }

 private:
  LivenessConfig config_;
  Clock::time_point last_heard_;
  Clock::time_point next_beat_;
  bool alive_ = true;
};

}  // namespace tessera
