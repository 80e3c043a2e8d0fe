// Private: the frontend's request metrics (docs/api.md, "Metrics"), each defined where it is
// declared. Ownership: references into a Registry that outlives it. Threading: thread-safe
// (metrics are atomic; the registry locks its own map).
#pragma once

#include <string>

#include "tessera/common/metrics.h"
#include "tessera/common/protocol.h"
#include "tessera/frontend/output_filter.h"

namespace tessera::frontend {

struct FrontendMetrics {
  explicit FrontendMetrics(metrics::Registry& r);
  void count_response(const std::string& route, int status);
  void finished(const protocol::FinalEvent& f);
  // Residual retrieve_fact calls removed from one response (output_filter.h), by format.
  void stripped(const FactCallCounts& counts);

  metrics::Registry& registry;
  metrics::Gauge& inflight;
  metrics::Counter& prompt_tokens;
  metrics::Counter& cached_tokens;
  metrics::Counter& completion_tokens;
  metrics::Gauge& prefix_hit_rate;
  metrics::Counter& disconnects;
  metrics::Counter& timeouts;
  metrics::Histogram& ttft;
  metrics::Histogram& e2e;
  metrics::Gauge& ready;
};

}  // namespace tessera::frontend
