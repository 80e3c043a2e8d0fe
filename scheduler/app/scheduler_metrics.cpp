#include "scheduler_metrics.h"

namespace tessera::scheduler_app {

SchedulerMetrics SchedulerMetrics::create(metrics::Registry& r) {
  return SchedulerMetrics{
      .registry = &r,
      .live_workers = &r.gauge("tessera_scheduler_live_workers", "registered workers answering heartbeats"),
      .running = &r.gauge("tessera_scheduler_running_requests", "requests running (holding pages) over all workers"),
      .waiting = &r.gauge("tessera_scheduler_waiting_requests", "requests queued for admission over all workers"),
      .prompt_tokens = &r.counter("tessera_scheduler_prompt_tokens_total", "prompt tokens of ended requests"),
      .cached_tokens = &r.counter("tessera_scheduler_cached_prompt_tokens_total",
                                  "prompt tokens of ended requests whose K/V came from the prefix cache"),
      .hit_rate = &r.gauge("tessera_scheduler_prefix_cache_hit_rate",
                           "prefix-cache hit rate = cached prompt tokens / prompt tokens, over ended requests"),
      .step_seconds = &r.histogram("tessera_scheduler_step_seconds", "step round trip: plan sent -> result received",
                                   metrics::latency_buckets()),
      .compute_seconds = &r.histogram("tessera_scheduler_worker_compute_seconds",
                                      "worker time executing one step plan (from step_result)", metrics::latency_buckets()),
      .ttft_seconds = &r.histogram("tessera_scheduler_ttft_seconds", "request arrival at the scheduler -> first token",
                                   metrics::latency_buckets()),
      .bad_frontend = &r.counter("tessera_scheduler_bad_messages_total", "messages that failed to decode, by source",
                                 {{"source", "frontend"}}),
      .bad_worker = &r.counter("tessera_scheduler_bad_messages_total", "messages that failed to decode, by source",
                               {{"source", "worker"}}),
      .peer_dead = &r.counter("tessera_scheduler_peer_dead_requests_total", "requests failed because their worker died"),
      .requeued = &r.counter("tessera_scheduler_requeued_requests_total",
                             "requests moved to another worker because theirs died before their first token"),
      .migrated = &r.counter("tessera_scheduler_migrated_requests_total",
                             "requests that had streamed tokens, moved to another worker because theirs died "
                             "(they resume after the tokens already sent)"),
      .preemptions = &r.counter("tessera_scheduler_preemptions_total", "sequences preempted (by recompute)"),
      .kv_evicted = &r.counter("tessera_scheduler_kv_evicted_tokens_total",
                               "positions dropped from sequences' K/V caches by a K/V policy (StreamingLLM, H2O)"),
      .kv_compactions = &r.counter("tessera_scheduler_kv_compactions_total",
                                   "K/V policy compactions (each drops positions and moves the survivors)"),
      .generated_tokens = &r.counter("tessera_scheduler_generation_tokens_total",
                                     "tokens sampled and sent to the frontends (stop tokens not included)"),
      .kv_usage = &r.gauge("tessera_scheduler_kv_cache_usage_ratio",
                           "K/V cache usage = held pages / all pages, over all workers (0 with none; cached pages count as free)"),
  };
}

}  // namespace tessera::scheduler_app
