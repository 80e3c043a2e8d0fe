// The load generator behind `tessera bench`: workloads, the closed-loop (fixed concurrency) and
// open-loop (Poisson request rate) drivers over the OpenAI-compatible HTTP API with streaming,
// and the latency summary.
//
// Definitions (per request, measured at the client):
//   TTFT  request sent -> first streamed token chunk
//   TPOT  (last chunk - first chunk) / (completion_tokens - 1), when completion_tokens >= 2
//   ITL   gap between two consecutive streamed chunks (every gap of every request)
// Throughput = completion tokens of successful requests / wall time of the run.
// The `rag` workload (bench/rag.h) runs its prepared requests through the same driver
// (run_prepared), once per caching mode.
//
// Thread-safety: run_load() spawns its own threads and returns when every request has ended.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tessera/common/curve.h"
#include "tessera/common/result.h"

namespace tessera::bench {

struct LoadConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                  // HTTP API (and /metrics, read in both modes)
  std::string api = "http";         // http | zmq (the frontend's msgpack client API)
  std::string zmq_endpoint = "tcp://127.0.0.1:8001";
  std::string workload = "random";  // random | shared-prefix | multi-turn | rag
  int num_requests = 64;            // multi-turn: total turns over all conversations
  int concurrency = 8;              // closed loop; used when request_rate == 0
  double request_rate = 0.0;        // requests per second (Poisson arrivals); 0 = closed loop
  int max_tokens = 64;
  int prompt_words = 64;            // random / question length, in words
  int num_groups = 4;               // shared-prefix: distinct system prompts
  int system_words = 400;           // shared-prefix: words per system prompt
  int turns = 4;                    // multi-turn: turns per conversation
  bool ignore_eos = true;           // fixed output lengths
  uint64_t seed = 1;
  int timeout_ms = 600000;
  double progress_s = 2.0;          // a progress line on stderr this often while it runs; 0 = none
  curve::ClientKeys curve;          // --api zmq against a --zmq-curve frontend; empty = plain
  // rag (bench/rag.h): k documents of a pool, shuffled per request, then a prompt_words question.
  int rag_pool = 8;                 // distinct documents
  int rag_k = 4;                    // documents per request
  int rag_doc_words = 96;           // words per document
  std::string rag_modes = "blend,prefix,none";  // run in this order against the same cluster
  bool rag_warmup = true;           // per mode, unmeasured: each document once first (bench/rag.h)
  double recompute_ratio = -1.0;    // blend mode's recompute_ratio; < 0 = the worker's default
  std::string cpu_pids;             // "PID,PID": local processes whose CPU time a run sums ("" = none)
  // rag: the scheduler's /metrics port on `host` (tessera up: scheduler-port + 2); blended steps and
  // fallbacks per request from its tessera_scheduler_blend_* counters. 0 = not read.
  int scheduler_metrics_port = 0;
};

struct RequestRecord {
  bool ok = false;
  std::string error;
  double ttft_ms = 0.0;
  double total_ms = 0.0;
  double tpot_ms = -1.0;  // < 0 when not defined
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
  int reused_tokens = 0;  // usage.prompt_tokens_details.reused_tokens (CacheBlend)
  std::vector<double> itl_ms;
};

struct Percentiles {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
  size_t count = 0;
};
Percentiles percentiles(std::vector<double> values);

struct LoadReport {
  LoadConfig config;
  std::vector<RequestRecord> requests;
  double wall_s = 0.0;
  int ok = 0, failed = 0;
  Percentiles ttft, tpot, itl, e2e;
  double output_tokens_per_s = 0.0;
  double requests_per_s = 0.0;
  int64_t prompt_tokens = 0, cached_tokens = 0, reused_tokens = 0, completion_tokens = 0;
  double cpu_s = -1.0;            // CPU seconds of config.cpu_pids over the run; < 0 when not measured
  double usage_hit_rate = 0.0;    // cached / prompt tokens over this run's usage fields
  double metrics_hit_rate = -1.0; // from the frontend's /metrics counters (delta over the run); < 0 when unread
  std::vector<std::string> sample_errors;
};

// kInvalidArgument for a bad config; otherwise the report (failed requests are counted in it).
// Workloads random, shared-prefix and multi-turn (rag: bench/rag.h).
Result<LoadReport> run_load(const LoadConfig& config);

// Streams each body (a /v1/completions request; "stream" and the usage option are set here)
// through the same driver (config's concurrency or request rate, HTTP only) and summarizes them.
Result<LoadReport> run_prepared(const LoadConfig& config, const std::vector<std::string>& bodies);

// `n` words of a small children's-story vocabulary, separated by spaces (the workloads' text).
std::string random_words(std::mt19937_64& rng, int n);

// Sum of utime + stime of the comma-separated local pids, in seconds; < 0 when one is unreadable.
double cpu_seconds(const std::string& pids);

std::string report_json(const LoadReport& report);
std::string report_table(const LoadReport& report);

}  // namespace tessera::bench
