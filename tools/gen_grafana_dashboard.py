#!/usr/bin/env python3
"""Writes deploy/grafana/tessera.json, the Grafana dashboard of every Tessera metric family.

    tools/gen_grafana_dashboard.py > deploy/grafana/tessera.json

Edit the panel list below, not the JSON. tests/integration/cluster/grafana_test.cpp checks the
result: valid JSON with the dashboard schema essentials, and every metric it queries present in
a real scrape (the worker and kvstore families once their /metrics exist).
"""
import json

DS = {"type": "prometheus", "uid": "${datasource}"}
RATE = "[$__rate_interval]"


def q(expr, legend=""):
    return {"expr": expr, "legendFormat": legend}


def hq(metric, by, legend, sel=""):
    """p50 and p99 of a histogram, by the given labels."""
    s = "{%s}" % sel if sel else ""
    return [q("histogram_quantile(0.5, sum by (le, %s) (rate(%s_bucket%s%s)))" % (by, metric, s, RATE), "p50 " + legend),
            q("histogram_quantile(0.99, sum by (le, %s) (rate(%s_bucket%s%s)))" % (by, metric, s, RATE), "p99 " + legend)]


ROWS = [
    ("Frontend: requests", [
        ("Requests finished / s by reason", "reqps",
         [q("sum by (finish_reason) (rate(tessera_frontend_requests_finished_total{model=~\"$model\"}%s))" % RATE, "{{finish_reason}}")]),
        ("HTTP responses / s by route and status", "reqps",
         [q("sum by (route, status) (rate(tessera_frontend_http_responses_total%s))" % RATE, "{{route}} {{status}}")]),
        ("In flight, ready, dashboard streams", "short",
         [q("tessera_frontend_inflight_requests", "in flight {{instance}}"), q("tessera_frontend_ready", "ready {{instance}}"),
          q("tessera_frontend_dashboard_streams", "dashboard streams {{instance}}")]),
        ("Time to first token", "s", hq("tessera_frontend_ttft_seconds", "model", "{{model}}", "model=~\"$model\"")),
        ("Time per output token", "s", hq("tessera_frontend_time_per_output_token_seconds", "model", "{{model}}", "model=~\"$model\"")),
        ("Inter-token latency", "s", hq("tessera_frontend_inter_token_latency_seconds", "model", "{{model}}", "model=~\"$model\"")),
        ("Queue time", "s", hq("tessera_frontend_queue_seconds", "model", "{{model}}", "model=~\"$model\"")),
        ("End-to-end request time", "s", hq("tessera_frontend_request_seconds", "model", "{{model}}", "model=~\"$model\"")),
        ("Prompt length (tokens)", "short", hq("tessera_frontend_prompt_length_tokens", "model", "{{model}}", "model=~\"$model\"")),
        ("Generation length (tokens)", "short", hq("tessera_frontend_generation_length_tokens", "model", "{{model}}", "model=~\"$model\"")),
        ("Tokens / s (prompt, cached, completion)", "short",
         [q("sum(rate(tessera_frontend_prompt_tokens_total{model=~\"$model\"}%s))" % RATE, "prompt"),
          q("sum(rate(tessera_frontend_cached_prompt_tokens_total{model=~\"$model\"}%s))" % RATE, "cached prompt"),
          q("sum(rate(tessera_frontend_completion_tokens_total{model=~\"$model\"}%s))" % RATE, "completion")]),
        ("Prefix cache hit rate (frontend view)", "percentunit", [q("tessera_frontend_prefix_cache_hit_rate", "{{instance}}")]),
        ("Errors / s", "short",
         [q("sum(rate(tessera_frontend_request_timeouts_total%s))" % RATE, "timeouts"),
          q("sum(rate(tessera_frontend_client_disconnects_total%s))" % RATE, "client disconnects"),
          q("sum(rate(tessera_frontend_peer_dead_requests_total%s))" % RATE, "peer dead"),
          q("sum by (source) (rate(tessera_frontend_bad_messages_total%s))" % RATE, "bad messages {{source}}"),
          q("sum(rate(tessera_frontend_requeued_requests_total%s))" % RATE, "re-queued (worker died)"),
          q("sum(rate(tessera_frontend_refused_peers_total%s))" % RATE, "refused peers (CURVE)")]),
        ("Stored preferences / s", "short",
         [q("sum(rate(tessera_frontend_stored_preference_lookups_total%s))" % RATE, "lookups"),
          q("sum(rate(tessera_frontend_stored_preference_used_total%s))" % RATE, "used"),
          q("sum(rate(tessera_frontend_stored_preference_errors_total%s))" % RATE, "errors")]),
        ("Preference requests / s, K/V bytes / s, transfer (frontend view)", "short",
         [q("sum by (source) (rate(tessera_frontend_preference_requests_total%s))" % RATE, "requests {{source}}"),
          q("sum by (source) (rate(tessera_frontend_preference_kv_bytes_total%s))" % RATE, "bytes {{source}}"),
          q("sum(rate(tessera_frontend_preference_transfer_seconds_total%s))" % RATE, "transfer s/s")]),
        ("retrieve_fact calls stripped / s", "short",
         [q("sum by (format) (rate(tessera_frontend_retrieve_fact_stripped_total%s))" % RATE, "{{format}}")]),
    ]),
    ("Frontend: schedulers seen through heartbeats", [
        ("Scheduler up (per scheduler)", "short", [q("tessera_frontend_scheduler_up", "{{endpoint}}")]),
        ("Requests routed to each scheduler / s (bounded-load ring: owner or spill)", "reqps",
         [q("sum by (scheduler, reason) (rate(tessera_frontend_scheduler_routed_requests_total%s))" % RATE,
            "{{scheduler}} {{reason}}")]),
        ("In flight per scheduler (the ring's load) and its max / mean", "short",
         [q("sum by (scheduler) (tessera_frontend_scheduler_inflight)", "{{scheduler}}"),
          q("max(tessera_frontend_scheduler_inflight) / clamp_min(avg(tessera_frontend_scheduler_inflight), 1e-9)",
            "max / mean")]),
        ("Scheduler membership (listed, usable) and changes / s", "short",
         [q("sum by (state) (tessera_frontend_schedulers)", "{{state}}"),
          q("sum by (change) (rate(tessera_frontend_scheduler_membership_changes_total%s))" % RATE, "{{change}}")]),
        ("Pages per worker (heartbeats)", "short",
         [q("tessera_frontend_scheduler_pages{worker=~\"$worker\"}", "{{scheduler}} {{worker}} {{state}}")]),
        ("Requests per worker (heartbeats)", "short",
         [q("tessera_frontend_scheduler_requests{worker=~\"$worker\"}", "{{scheduler}} {{worker}} {{state}}")]),
    ]),
    ("Scheduler (per scheduler)", [
        ("Live workers", "short", [q("tessera_scheduler_live_workers{instance=~\"$scheduler\"}", "{{instance}}"),
                                   q("tessera_scheduler_draining_workers{instance=~\"$scheduler\"}", "draining {{instance}}")]),
        ("Refused peers / s (CURVE)", "short",
         [q("sum by (instance) (rate(tessera_scheduler_refused_peers_total{instance=~\"$scheduler\"}%s))" % RATE, "{{instance}}")]),
        ("Running / waiting", "short",
         [q("tessera_scheduler_running_requests{instance=~\"$scheduler\"}", "running {{instance}}"),
          q("tessera_scheduler_waiting_requests{instance=~\"$scheduler\"}", "waiting {{instance}}")]),
        ("K/V cache usage", "percentunit", [q("tessera_scheduler_kv_cache_usage_ratio{instance=~\"$scheduler\"}", "{{instance}}")]),
        ("Prefix cache hit rate", "percentunit", [q("tessera_scheduler_prefix_cache_hit_rate{instance=~\"$scheduler\"}", "{{instance}}")]),
        ("Prompt / cached / generated tokens per s", "short",
         [q("sum by (instance) (rate(tessera_scheduler_prompt_tokens_total{instance=~\"$scheduler\"}%s))" % RATE, "prompt {{instance}}"),
          q("sum by (instance) (rate(tessera_scheduler_cached_prompt_tokens_total{instance=~\"$scheduler\"}%s))" % RATE, "cached {{instance}}"),
          q("sum by (instance) (rate(tessera_scheduler_generation_tokens_total{instance=~\"$scheduler\"}%s))" % RATE, "generated {{instance}}")]),
        ("Requests ended / s by reason", "reqps",
         [q("sum by (instance, reason) (rate(tessera_scheduler_requests_total{instance=~\"$scheduler\"}%s))" % RATE, "{{instance}} {{reason}}")]),
        ("Scheduler TTFT", "s", hq("tessera_scheduler_ttft_seconds", "instance", "{{instance}}", "instance=~\"$scheduler\"")),
        ("Step round trip", "s", hq("tessera_scheduler_step_seconds", "instance", "{{instance}}", "instance=~\"$scheduler\"")),
        ("Worker compute per step (from step results)", "s",
         hq("tessera_scheduler_worker_compute_seconds", "instance", "{{instance}}", "instance=~\"$scheduler\"")),
        ("Failures / s", "short",
         [q("sum by (instance) (rate(tessera_scheduler_peer_dead_requests_total%s))" % RATE, "peer dead {{instance}}"),
          q("sum by (instance) (rate(tessera_scheduler_requeued_requests_total%s))" % RATE, "requeued {{instance}}"),
          q("sum by (instance) (rate(tessera_scheduler_preemptions_total%s))" % RATE, "preemptions {{instance}}"),
          q("sum by (instance, source) (rate(tessera_scheduler_bad_messages_total%s))" % RATE, "bad messages {{instance}} {{source}}")]),
        ("Worker failover: requests moved / s", "short",
         [q("sum by (instance) (rate(tessera_scheduler_requeued_requests_total%s))" % RATE, "re-queued (nothing streamed) {{instance}}"),
          q("sum by (instance) (rate(tessera_scheduler_migrated_requests_total%s))" % RATE, "migrated (resumed mid-stream) {{instance}}"),
          q("sum by (instance) (rate(tessera_scheduler_peer_dead_requests_total%s))" % RATE, "lost (peer_dead) {{instance}}")]),
        ("Preference fills / s by source", "short",
         [q("sum by (source) (rate(tessera_scheduler_preference_fills_total%s))" % RATE, "{{source}}")]),
        ("Preference K/V bytes / s and transfer time", "short",
         [q("sum by (source) (rate(tessera_scheduler_preference_kv_bytes_total%s))" % RATE, "bytes {{source}}"),
          q("sum(rate(tessera_scheduler_preference_transfer_seconds_total%s))" % RATE, "transfer s/s")]),
    ]),
    ("Scheduler (per worker)", [
        ("Pages by state", "short", [q("tessera_scheduler_pages{worker=~\"$worker\"}", "{{worker}} {{state}}")]),
        ("Pinned prefix pages", "short", [q("tessera_scheduler_pinned_pages{worker=~\"$worker\"}", "{{worker}}")]),
        ("K/V policy: evicted tokens / s, compactions / s", "short",
         [q("rate(tessera_scheduler_kv_evicted_tokens_total[$__rate_interval])", "evicted tokens"),
          q("rate(tessera_scheduler_kv_compactions_total[$__rate_interval])", "compactions")]),
        ("Routed requests / s", "reqps",
         [q("sum by (worker, reason) (rate(tessera_scheduler_routed_requests_total{worker=~\"$worker\"}%s))" % RATE, "{{worker}} {{reason}}")]),
        ("K/V offload: pages spilled / stored / reloaded / missed per s", "short",
         [q("sum by (instance) (rate(tessera_scheduler_kv_offload_spilled_pages_total%s))" % RATE, "spilled {{instance}}"),
          q("sum by (instance) (rate(tessera_scheduler_kv_offload_offloaded_pages_total%s))" % RATE, "stored {{instance}}"),
          q("sum by (instance) (rate(tessera_scheduler_kv_offload_reloaded_pages_total%s))" % RATE, "reloaded {{instance}}"),
          q("sum by (instance) (rate(tessera_scheduler_kv_offload_reload_missed_pages_total%s))" % RATE, "missed {{instance}}")]),
        ("K/V offload: reloads, tokens and bytes / s; directory", "short",
         [q("sum by (instance) (rate(tessera_scheduler_kv_offload_reloads_total%s))" % RATE, "reloads {{instance}}"),
          q("sum by (instance) (rate(tessera_scheduler_kv_offload_reloaded_tokens_total%s))" % RATE, "tokens {{instance}}"),
          q("sum by (instance) (rate(tessera_scheduler_kv_offload_reload_bytes_total%s))" % RATE, "bytes {{instance}}"),
          q("tessera_scheduler_kv_offload_directory_entries", "directory entries {{instance}}")]),
        ("CacheBlend: blended chunks / s, fallbacks / s", "short",
         [q("sum by (instance) (rate(tessera_scheduler_blend_steps_total%s))" % RATE, "blended chunks {{instance}}"),
          q("sum by (instance) (rate(tessera_scheduler_blend_fallbacks_total%s))" % RATE, "fallbacks {{instance}}")]),
    ]),
    ("Workers", [
        ("Step time", "s", hq("tessera_worker_step_seconds", "worker", "{{worker}}", "worker=~\"$worker\"")),
        ("Batch size (sequences per step)", "short", hq("tessera_worker_batch_size", "worker", "{{worker}}", "worker=~\"$worker\"")),
        ("Tokens per step", "short", hq("tessera_worker_step_tokens", "worker", "{{worker}}", "worker=~\"$worker\"")),
        ("Steps / s by result, tokens / s", "short",
         [q("sum by (worker, result) (rate(tessera_worker_steps_total{worker=~\"$worker\"}%s))" % RATE, "steps {{worker}} {{result}}"),
          q("sum by (worker) (rate(tessera_worker_tokens_total{worker=~\"$worker\"}%s))" % RATE, "tokens {{worker}}")]),
        ("K/V pool pages", "short", [q("tessera_worker_kv_pages{worker=~\"$worker\"}", "{{worker}} {{state}}")]),
        ("Resident memory", "bytes", [q("tessera_worker_resident_memory_bytes{worker=~\"$worker\"}", "{{worker}}")]),
        ("K/V offload (worker): pages and bytes / s, reload time", "short",
         [q("sum by (worker, direction) (rate(tessera_worker_kv_offload_pages_total{worker=~\"$worker\"}%s))" % RATE, "pages {{worker}} {{direction}}"),
          q("sum by (worker, direction) (rate(tessera_worker_kv_offload_bytes_total{worker=~\"$worker\"}%s))" % RATE, "bytes {{worker}} {{direction}}"),
          q("sum by (worker) (rate(tessera_worker_kv_offload_raw_bytes_total{worker=~\"$worker\"}%s))" % RATE, "raw bytes {{worker}}"),
          q("sum by (worker) (rate(tessera_worker_kv_offload_reloads_total{worker=~\"$worker\"}%s))" % RATE, "reloads {{worker}}"),
          q("sum by (worker) (rate(tessera_worker_kv_offload_reload_seconds_total{worker=~\"$worker\"}%s))" % RATE, "reload s/s {{worker}}")]),
        ("CacheBlend: documents / s, tokens reused vs recomputed / s", "short",
         [q("sum by (worker) (rate(tessera_worker_blend_prefills_total{worker=~\"$worker\"}%s))" % RATE, "prefills {{worker}}"),
          q("sum by (worker, result) (rate(tessera_worker_blend_chunks_total{worker=~\"$worker\"}%s))" % RATE, "documents {{worker}} {{result}}"),
          q("sum by (worker) (rate(tessera_worker_blend_chunk_evictions_total{worker=~\"$worker\"}%s))" % RATE, "evictions {{worker}}"),
          q("sum by (worker) (rate(tessera_worker_blend_reused_tokens_total{worker=~\"$worker\"}%s))" % RATE, "reused {{worker}}"),
          q("sum by (worker) (rate(tessera_worker_blend_recomputed_tokens_total{worker=~\"$worker\"}%s))" % RATE, "recomputed {{worker}}")]),
        ("CacheBlend chunk cache", "short",
         [q("tessera_worker_blend_cache_entries{worker=~\"$worker\"}", "documents {{worker}}"),
          q("tessera_worker_blend_cache_bytes{worker=~\"$worker\"}", "bytes {{worker}}")]),
        ("Registered / draining / kernel", "short",
         [q("tessera_worker_registered{worker=~\"$worker\"}", "registered {{worker}}"),
          q("tessera_worker_draining{worker=~\"$worker\"}", "draining {{worker}}"),
          q("tessera_worker_scheduler_switches_total{worker=~\"$worker\"}", "scheduler switches {{worker}}"),
          q("tessera_worker_info{worker=~\"$worker\"}", "{{worker}} {{backend}} {{kernel_isa}}")]),
    ]),
    ("kvstore", [
        ("Hits / misses per s by tier", "short",
         [q("sum by (tier) (rate(tessera_kvstore_hits_total%s))" % RATE, "hits {{tier}}"),
          q("sum by (tier) (rate(tessera_kvstore_misses_total%s))" % RATE, "misses {{tier}}")]),
        ("Requests / s by type", "reqps",
         [q("sum by (type) (rate(tessera_kvstore_requests_total%s))" % RATE, "{{type}}"),
          q("sum(rate(tessera_kvstore_bad_requests_total%s))" % RATE, "bad"),
          q("sum(rate(tessera_kvstore_overloaded_total%s))" % RATE, "overloaded"),
          q("sum(rate(tessera_kvstore_refused_peers_total%s))" % RATE, "refused peers (CURVE)"),
          q("sum(rate(tessera_kvstore_l2_write_backs_total%s))" % RATE, "written back to Redis")]),
        ("Puts / s", "short",
         [q("sum(rate(tessera_kvstore_puts_total%s))" % RATE, "accepted"),
          q("sum(rate(tessera_kvstore_rejected_puts_total%s))" % RATE, "rejected")]),
        ("Bytes / s", "Bps",
         [q("sum(rate(tessera_kvstore_put_bytes_total%s))" % RATE, "put"), q("sum(rate(tessera_kvstore_get_bytes_total%s))" % RATE, "get"),
          q("sum(rate(tessera_kvstore_l2_bytes_written_total%s))" % RATE, "redis written"),
          q("sum(rate(tessera_kvstore_l2_bytes_read_total%s))" % RATE, "redis read")]),
        ("L1 (RAM tier)", "short",
         [q("tessera_kvstore_l1_entries", "entries {{instance}}"), q("tessera_kvstore_l1_users", "users {{instance}}"),
          q("sum by (reason) (rate(tessera_kvstore_l1_evictions_total%s))" % RATE, "evictions/s {{reason}}"),
          q("sum(rate(tessera_kvstore_l1_remote_invalidations_total%s))" % RATE, "remote invalidations/s")]),
        ("L1 bytes", "bytes", [q("tessera_kvstore_l1_bytes", "{{instance}}")]),
        ("Redis (L2 tier)", "short",
         [q("tessera_kvstore_redis_up", "up {{instance}}"),
          q("sum(rate(tessera_kvstore_redis_reconnects_total%s))" % RATE, "reconnects/s"),
          q("sum(rate(tessera_kvstore_l2_errors_total%s))" % RATE, "errors/s"),
          q("sum(rate(tessera_kvstore_l2_puts_total%s))" % RATE, "puts/s"),
          q("sum(rate(tessera_kvstore_mac_failures_total%s))" % RATE, "MAC failures/s")]),
        ("Redis shards (L2 spread over several Redis)", "short",
         [q("min by (shard) (tessera_kvstore_redis_shard_up)", "up {{shard}}"),
          q("sum by (shard) (rate(tessera_kvstore_redis_shard_errors_total%s))" % RATE, "errors/s {{shard}}"),
          q("sum by (shard) (rate(tessera_kvstore_redis_shard_reconnects_total%s))" % RATE, "reconnects/s {{shard}}")]),
    ]),
]


def template(name, label, query):
    return {"name": name, "label": label, "type": "query", "datasource": DS, "query": {"query": query, "refId": name},
            "definition": query, "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 1}


def main():
    panels, pid, y = [], 1, 0
    for row_title, row_panels in ROWS:
        panels.append({"type": "row", "title": row_title, "id": pid, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid += 1
        y += 1
        for i, (title, unit, targets) in enumerate(row_panels):
            for k, t in enumerate(targets):
                t["refId"] = chr(ord("A") + k)
                t["datasource"] = DS
            panels.append({"type": "timeseries", "title": title, "id": pid, "datasource": DS,
                           "gridPos": {"h": 8, "w": 8, "x": (i % 3) * 8, "y": y + (i // 3) * 8},
                           "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                           "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
                           "targets": targets})
            pid += 1
        y += ((len(row_panels) + 2) // 3) * 8
    dash = {
        "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource", "pluginId": "prometheus", "pluginName": "Prometheus"}],
        "title": "Tessera", "uid": "tessera-cluster", "description": "Tessera cluster: frontend, scheduler, worker and kvstore metrics (docs/operations.md)",
        "tags": ["tessera", "llm"], "timezone": "browser", "editable": True, "schemaVersion": 39, "version": 1,
        "refresh": "10s", "time": {"from": "now-1h", "to": "now"}, "graphTooltip": 1,
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus", "current": {}},
            template("model", "Model", "label_values(tessera_frontend_requests_finished_total, model)"),
            template("scheduler", "Scheduler", "label_values(tessera_scheduler_live_workers, instance)"),
            template("worker", "Worker", "label_values(tessera_scheduler_pages, worker)"),
        ]},
        "panels": panels,
    }
    print(json.dumps(dash, indent=1))


if __name__ == "__main__":
    main()
