// Admission: the limits a request must pass before the frontend spends anything on it (no
// tokenization, no kvstore lookup, no scheduler message before a slot is held).
//
// A request is refused with kOverloaded (HTTP 429) when the schedulers' queues are full
// (--max-queued-requests, from their heartbeats) or --max-concurrent-requests requests already
// hold a slot. A Slot is held for the whole life of the request and released by its destructor
// on every path (answer, error, cancel, timeout, client gone, shutdown).
//
// Ownership: Admission owns the counter; each Slot points into it, so Admission must outlive
// every Slot. Threading: admit() and Slot destruction are thread-safe (atomics).
// Invariant: in_flight() == live Slots <= max_concurrent.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "tessera/common/metrics.h"
#include "tessera/common/result.h"

namespace tessera::frontend {

struct AdmissionConfig {
  int32_t max_concurrent = 256;
  int32_t max_queued = 1024;
};

class Admission {
 public:
  class Slot {
   public:
    ~Slot() {
      owner_->in_flight_.fetch_sub(1);
      owner_->gauge_.dec();
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    friend class Admission;
    explicit Slot(Admission* owner) : owner_(owner) { owner_->gauge_.inc(); }
    Admission* owner_;
  };

  // `in_flight_gauge` mirrors in_flight() (tessera_frontend_inflight_requests).
  Admission(AdmissionConfig config, metrics::Gauge& in_flight_gauge) : config_(config), gauge_(in_flight_gauge) {}

  class Activity {
   public:
    explicit Activity(Admission& owner) : owner_(&owner) { owner_->active_.fetch_add(1); }
    ~Activity() { owner_->active_.fetch_sub(1); }
    Activity(const Activity&) = delete;
    Activity& operator=(const Activity&) = delete;

   private:
    Admission* owner_;
  };

  // `scheduler_waiting`: requests queued at the schedulers (Hub::waiting()).
  Result<std::unique_ptr<Slot>> admit(int32_t scheduler_waiting);
  int32_t in_flight() const { return in_flight_.load(); }
  int32_t active() const { return active_.load(); }

  // True the first time only (the caller that starts the drain).
  bool begin_drain() { return !draining_.exchange(true); }
  bool draining() const { return draining_.load(); }
  void expire_drain() { drain_expired_.store(true); }
  bool drain_expired() const { return drain_expired_.load(); }

 private:
  const AdmissionConfig config_;
  metrics::Gauge& gauge_;
  std::atomic<int32_t> in_flight_{0};
  std::atomic<int32_t> active_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> drain_expired_{false};
};

}  // namespace tessera::frontend
