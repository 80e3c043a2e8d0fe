#include "frontend_metrics.h"

namespace tessera::frontend {

FrontendMetrics::FrontendMetrics(metrics::Registry& r)
    : registry(r),
      inflight(r.gauge("tessera_frontend_inflight_requests", "generation requests in flight at this frontend")),
      prompt_tokens(r.counter("tessera_frontend_prompt_tokens_total", "prompt tokens of finished requests")),
      cached_tokens(r.counter("tessera_frontend_cached_prompt_tokens_total",
                              "prompt tokens of finished requests whose K/V came from the prefix cache")),
      completion_tokens(r.counter("tessera_frontend_completion_tokens_total", "tokens generated for finished requests")),
      prefix_hit_rate(r.gauge("tessera_frontend_prefix_cache_hit_rate",
                              "prefix-cache hit rate = cached prompt tokens / prompt tokens, over finished requests")),
      disconnects(r.counter("tessera_frontend_client_disconnects_total", "requests cancelled because the client went away")),
      timeouts(r.counter("tessera_frontend_request_timeouts_total", "requests cancelled after request-timeout-ms")),
      ttft(r.histogram("tessera_frontend_ttft_seconds", "time to first token: request arrival -> first token event",
                       metrics::latency_buckets())),
      e2e(r.histogram("tessera_frontend_request_seconds", "request arrival -> last byte of the response", metrics::latency_buckets())),
      ready(r.gauge("tessera_frontend_ready", "1 while a scheduler with a live worker answers heartbeats")) {
  stripped(FactCallCounts{});  // the per-format series exist (at 0) before the first removal
}

void FrontendMetrics::count_response(const std::string& route, int status) {
  registry.counter("tessera_frontend_http_responses_total", "HTTP responses by route and status",
                   {{"route", route}, {"status", std::to_string(status)}})
      .inc();
}

void FrontendMetrics::finished(const protocol::FinalEvent& f) {
  prompt_tokens.inc(f.usage.prompt_tokens);
  cached_tokens.inc(f.usage.cached_tokens);
  completion_tokens.inc(f.usage.completion_tokens);
  double p = prompt_tokens.value();
  prefix_hit_rate.set(p > 0 ? cached_tokens.value() / p : 0.0);
  const protocol::Usage& u = f.usage;
  if (!u.preference_source.empty()) {  // dki: same figures as the response's usage.preference
    const metrics::Labels source{{"source", u.preference_source}};
    registry.counter("tessera_frontend_preference_requests_total",
                     "finished requests with an injected preference, by where its K/V came from "
                     "(memory = scheduler prefix cache, kvstore = kvstore L1, redis = kvstore L2, compute = prefilled)",
                     source).inc();
    registry.counter("tessera_frontend_preference_kv_bytes_total",
                     "preference K/V bytes of finished requests: blob bytes fetched (kvstore, redis) or f32 bytes computed (compute)",
                     source).inc(static_cast<double>(u.preference_kv_bytes));
    registry.counter("tessera_frontend_preference_transfer_seconds_total",
                     "kvstore get + decode + copy-into-pages time of the preference K/V of finished requests", source)
        .inc(u.preference_transfer_ms / 1000.0);
  }
}

void FrontendMetrics::stripped(const FactCallCounts& c) {
  const std::pair<const char*, uint64_t> by_format[] = {{"generic", c.generic}, {"deepseek", c.deepseek}, {"glm", c.glm}};
  for (const auto& [format, n] : by_format)
    registry.counter("tessera_frontend_retrieve_fact_stripped_total",
                       "residual retrieve_fact tool calls removed from generated text, by call format", {{"format", format}})
          .inc(static_cast<double>(n));
}

}  // namespace tessera::frontend
