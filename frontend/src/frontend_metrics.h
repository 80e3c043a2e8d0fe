// Private: the frontend's request metrics (docs/api.md "Metrics", docs/operations.md), each
// defined where it is declared. Request-level series carry a `model` label; every series exists
// (at 0) from construction. Ownership: references into a Registry that outlives it. Threading:
// thread-safe (metrics are atomic; the registry locks its own map).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "tessera/common/metrics.h"
#include "tessera/common/protocol.h"
#include "tessera/frontend/output_filter.h"

namespace tessera::frontend {

struct FrontendMetrics;

// One request's token timings, kept by whoever serves it (an HTTP connection or a ZeroMQ sink).
// on_token() observes TTFT at the first token event and the inter-token latency between events.
class RequestClock {
 public:
  using Clock = std::chrono::steady_clock;
  RequestClock() : arrival_(Clock::now()) {}
  void on_token(FrontendMetrics& m);
  Clock::time_point arrival() const { return arrival_; }
  // Milliseconds from arrival to the first token event; nullopt before it.
  std::optional<double> ttft_ms() const;
  double elapsed_ms() const { return std::chrono::duration<double, std::milli>(Clock::now() - arrival_).count(); }

 private:
  Clock::time_point arrival_;
  std::optional<Clock::time_point> first_, last_;
};

// How a request ended, for the histograms and the finish-reason counter. finish_reason is one
// of stop | length | cancelled | error | disconnect.
struct RequestOutcome {
  std::string finish_reason;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  double queue_ms = -1;  // scheduler admission wait; < 0 when unknown
};

struct FrontendMetrics {
  FrontendMetrics(metrics::Registry& r, const std::string& model);
  void count_response(const std::string& route, int status);
  void finished(const protocol::FinalEvent& f);
  // Observes end-to-end time, time per output token, lengths, queue time and the finish reason.
  void done(const RequestClock& clock, const RequestOutcome& outcome);
  // Residual retrieve_fact calls removed from one response (output_filter.h), by format.
  void stripped(const FactCallCounts& counts);

  metrics::Registry& registry;
  const std::string model;
  metrics::Gauge& inflight;
  metrics::Counter& prompt_tokens;
  metrics::Counter& cached_tokens;
  metrics::Counter& completion_tokens;
  metrics::Gauge& prefix_hit_rate;
  metrics::Counter& disconnects;
  metrics::Counter& timeouts;
  metrics::Counter& requeued;
  metrics::Histogram& ttft;
  metrics::Histogram& e2e;
  metrics::Histogram& tpot;
  metrics::Histogram& itl;
  metrics::Histogram& queue;
  metrics::Histogram& prompt_length;
  metrics::Histogram& generation_length;
  metrics::Gauge& ready;
};

}  // namespace tessera::frontend
