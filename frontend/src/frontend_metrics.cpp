#include "frontend_metrics.h"

namespace tessera::frontend {
namespace {

constexpr const char* kFinishReasons[] = {"stop", "length", "cancelled", "error", "disconnect"};

// Token counts: 1 .. 128 Ki, by powers of two.
std::vector<double> length_buckets() {
  std::vector<double> b;
  for (double v = 1; v <= 131072; v *= 2) b.push_back(v);
  return b;
}

// Per-token latency in seconds: 1 ms .. 10 s.
std::vector<double> token_latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5, 10};
}

// Request-level latency in seconds: 1 ms .. 1 h (the request timeout is 300 s by default).
std::vector<double> request_buckets() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600};
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void RequestClock::on_token(FrontendMetrics& m) {
  const auto now = Clock::now();
  if (!first_) {
    first_ = now;
    m.ttft.observe(seconds(now - arrival_));
  } else {
    m.itl.observe(seconds(now - *last_));
  }
  last_ = now;
}

std::optional<double> RequestClock::ttft_ms() const {
  if (!first_) return std::nullopt;
  return std::chrono::duration<double, std::milli>(*first_ - arrival_).count();
}

FrontendMetrics::FrontendMetrics(metrics::Registry& r, const std::string& model_name)
    : registry(r),
      model(model_name),
      inflight(r.gauge("tessera_frontend_inflight_requests", "generation requests in flight at this frontend")),
      prompt_tokens(r.counter("tessera_frontend_prompt_tokens_total", "prompt tokens of finished requests", {{"model", model}})),
      cached_tokens(r.counter("tessera_frontend_cached_prompt_tokens_total",
                              "prompt tokens of finished requests whose K/V came from the prefix cache", {{"model", model}})),
      completion_tokens(r.counter("tessera_frontend_completion_tokens_total", "tokens generated for finished requests",
                                  {{"model", model}})),
      prefix_hit_rate(r.gauge("tessera_frontend_prefix_cache_hit_rate",
                              "prefix-cache hit rate = cached prompt tokens / prompt tokens, over finished requests")),
      disconnects(r.counter("tessera_frontend_client_disconnects_total", "requests cancelled because the client went away")),
      timeouts(r.counter("tessera_frontend_request_timeouts_total",
                         "requests cancelled after request-timeout-ms or http-write-timeout-ms")),
      requeued(r.counter("tessera_frontend_requeued_requests_total",
                         "requests submitted again because their worker or scheduler died before the client saw anything")),
      ttft(r.histogram("tessera_frontend_ttft_seconds", "time to first token: request arrival -> first token event",
                       request_buckets(), {{"model", model}})),
      e2e(r.histogram("tessera_frontend_request_seconds",
                      "end-to-end request latency: request arrival -> the request's end (final event, error, timeout or disconnect)",
                      request_buckets(), {{"model", model}})),
      tpot(r.histogram("tessera_frontend_time_per_output_token_seconds",
                       "time per output token = (end - first token) / (completion tokens - 1), requests with >= 2 tokens",
                       token_latency_buckets(), {{"model", model}})),
      itl(r.histogram("tessera_frontend_inter_token_latency_seconds",
                      "inter-token latency: time between two consecutive token events of a request", token_latency_buckets(),
                      {{"model", model}})),
      queue(r.histogram("tessera_frontend_queue_seconds",
                        "scheduler queue time: arrival at the scheduler -> admission into a batch (from the final event)",
                        request_buckets(), {{"model", model}})),
      prompt_length(r.histogram("tessera_frontend_prompt_length_tokens", "prompt tokens per finished request", length_buckets(),
                                {{"model", model}})),
      generation_length(r.histogram("tessera_frontend_generation_length_tokens", "completion tokens per finished request",
                                    length_buckets(), {{"model", model}})),
      ready(r.gauge("tessera_frontend_ready", "1 while a scheduler with a live worker answers heartbeats")) {
  stripped(FactCallCounts{});  // the per-format series exist (at 0) before the first removal
  for (const char* reason : kFinishReasons)
    registry.counter("tessera_frontend_requests_finished_total",
                     "generation requests ended, by finish reason: stop (EOS, stop token or stop string), length "
                     "(max_tokens or context), cancelled (by the client's cancel or an admin), error, disconnect (client went away)",
                     {{"model", model}, {"finish_reason", reason}});
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

void FrontendMetrics::done(const RequestClock& clock, const RequestOutcome& o) {
  const double e2e_ms = clock.elapsed_ms();
  e2e.observe(e2e_ms / 1000.0);
  registry
      .counter("tessera_frontend_requests_finished_total", "", {{"model", model}, {"finish_reason", o.finish_reason}})
      .inc();
  if (o.finish_reason == "error" || o.finish_reason == "disconnect") return;
  prompt_length.observe(o.prompt_tokens);
  generation_length.observe(o.completion_tokens);
  if (o.queue_ms >= 0) queue.observe(o.queue_ms / 1000.0);
  if (auto first = clock.ttft_ms(); first && o.completion_tokens >= 2)
    tpot.observe((e2e_ms - *first) / 1000.0 / (o.completion_tokens - 1));
}

void FrontendMetrics::stripped(const FactCallCounts& c) {
  const std::pair<const char*, uint64_t> by_format[] = {{"generic", c.generic}, {"deepseek", c.deepseek}, {"glm", c.glm}};
  for (const auto& [format, n] : by_format)
    registry.counter("tessera_frontend_retrieve_fact_stripped_total",
                       "residual retrieve_fact tool calls removed from generated text, by call format", {{"format", format}})
          .inc(static_cast<double>(n));
}

}  // namespace tessera::frontend
