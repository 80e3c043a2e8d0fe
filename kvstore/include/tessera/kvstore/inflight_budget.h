// get_many's in-flight budget for one Redis shard (redis_l2.h): how many bytes of GET replies a
// pipelined get_many keeps in flight on its connection. Either fixed, or self-tuning to the
// bandwidth-delay product of the link to that shard (docs/kvstore.md "get_many's in-flight
// budget"):
//
//   budget = clamp(kGain x delivery rate x round-trip time + mean value size, min_bytes, max_bytes)
//
// (the window holds whole values and refills one per reply: while one value is in transit the
// others must cover the round trip, so it needs the bandwidth-delay product plus a value.)
// - round-trip time: the minimum of the recent samples (BBR's min-RTT filter: queueing and a late
//   wake-up only ever add to a sample, so the minimum is the path's own delay). Samples come from
//   the health thread (a PING timed every health interval) and from each get_many (the wait for
//   its first reply, an upper bound of the RTT: it includes the first value's transfer). The two
//   kinds are kept in separate rings of kRttSamples each and the minimum is over both, so a busy
//   shard's many get_many samples never push out the PINGs (which would overestimate the RTT and
//   so the budget).
// - delivery rate: the maximum of the last kRateSamples samples; one sample per get_many of two
//   or more replies: the bytes of the replies after the first over the time from the first reply
//   to the last. While the budget limits the pipeline the replies come one budget per round trip,
//   so the sample is budget / RTT and the next budget is kGain (2) times the last (plus a value):
//   the budget doubles per call until the link (or the reader: the MAC check and copies are in
//   the loop) is the limit, then stays at kGain x its bandwidth-delay product. A sample over less than half
//   an RTT is dropped: the replies were already waiting in the socket buffer, read at memory
//   speed, which says nothing about the link.
// - mean value size: of the last get_many's replies after the first.
// - before a rate sample (and an RTT sample) exists the budget is min_bytes.
// The estimates are kept and exported (metrics) with a fixed budget too; only bytes() differs.
//
// Thread-safety: every method may be called concurrently (one mutex; a get_many takes it twice).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string_view>

#include "tessera/common/result.h"

namespace tessera::kvstore {

enum class RttSource {
  kPing,        // the health check's timed PING
  kFirstReply,  // a get_many's wait for its first reply
};

struct InflightBudgetConfig {
  bool auto_tune = true;                        // false: bytes() is fixed_bytes
  uint64_t fixed_bytes = uint64_t{256} << 10;   // the fixed budget (0 = one GET per round trip)
  uint64_t min_bytes = uint64_t{256} << 10;     // auto: floor (and the budget before estimates)
  uint64_t max_bytes = uint64_t{8} << 20;       // auto: ceiling, a memory cap per get_many
};

// "auto" -> nullopt; "N" (0..1048576) -> N KiB in bytes; anything else an error naming the value.
Result<std::optional<uint64_t>> parse_inflight_kb(std::string_view text);

class InflightBudget {
 public:
  static constexpr double kGain = 2.0;
  static constexpr int kRttSamples = 16;   // per source; 8 s of health checks at the default 500 ms
  static constexpr int kRateSamples = 8;   // get_many calls

  struct Snapshot {
    uint64_t budget_bytes = 0;  // what bytes() answers now
    double rtt_s = 0;           // min-filtered RTT; 0 before the first sample
    double rate_bytes_per_s = 0;  // max-filtered delivery rate; 0 before the first sample
    uint64_t mean_value_bytes = 0;  // of the last get_many's later replies
  };

  // TS_CHECKs min_bytes <= max_bytes (callers validate user input first).
  explicit InflightBudget(const InflightBudgetConfig& config);

  uint64_t bytes() const;  // the budget for a get_many starting now
  // A sample ages out after kRttSamples newer ones from the same source.
  void add_rtt_sample(std::chrono::nanoseconds rtt, RttSource source = RttSource::kPing);
  // One get_many: `bytes` in `values` replies received after its first reply, over `interval`
  // (first reply to last). The rate sample is dropped when interval < RTT / 2 or before any RTT
  // sample; the mean value size (bytes / values) is kept either way.
  void add_delivery_sample(uint64_t bytes, uint64_t values, std::chrono::nanoseconds interval);
  Snapshot snapshot() const;
  const InflightBudgetConfig& config() const { return config_; }

 private:
  void update_locked();  // recomputes budget_ from the filters

  const InflightBudgetConfig config_;
  mutable std::mutex mu_;
  double rtt_ns_[2][kRttSamples] = {};  // GUARDED_BY(mu_); a ring per RttSource, 0 = empty slot
  int rtt_next_[2] = {};                // GUARDED_BY(mu_)
  double rate_[kRateSamples] = {};      // GUARDED_BY(mu_); bytes per second, ring
  int rate_next_ = 0;                   // GUARDED_BY(mu_)
  double min_rtt_ns_ = 0;               // GUARDED_BY(mu_)
  double max_rate_ = 0;                 // GUARDED_BY(mu_)
  uint64_t mean_value_ = 0;             // GUARDED_BY(mu_)
  uint64_t budget_ = 0;                 // GUARDED_BY(mu_)
};

}  // namespace tessera::kvstore
