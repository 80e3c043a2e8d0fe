// `tessera bench`: a load generator against a running cluster's HTTP or ZeroMQ API (bench/load.h):
// workloads random | shared-prefix | multi-turn | rag (bench/rag.h), fixed concurrency or Poisson request rate,
// TTFT / TPOT / ITL percentiles, throughput and the prefix-cache hit rate (from the responses'
// usage and from the frontend's /metrics), as a table and as JSON.
#include <cstdio>
#include <fstream>

#include "bench/load.h"
#include "bench/rag.h"
#include "tessera/common/config.h"
#include "tessera/common/curve.h"
#include "tessera/tools/command.h"

namespace tessera::tools {
namespace {

// The defaults are LoadConfig's member initializers (bench/load.h).
struct BenchArgs {
  bench::LoadConfig load;
  std::string json;  // "" = no JSON report, "-" = stdout
  std::string curve_dir;  // client key pair + frontend.key for --api zmq with --zmq-curve
};

void declare_bench_options(config::Options& o, BenchArgs& c) {
  o.add(c.load.host, {.name = "host", .help = "frontend address", .env = "TESSERA_BENCH_HOST"});
  o.add(c.load.port, {.name = "port", .help = "frontend HTTP port", .env = "TESSERA_BENCH_PORT", .min = 1,
                      .max = 65535});
  o.add(c.load.api, {.name = "api", .help = "http (OpenAI API, SSE) or zmq (the frontend's msgpack client API)",
                     .env = "TESSERA_BENCH_API", .choices = {"http", "zmq"}});
  o.add(c.load.zmq_endpoint, {.name = "zmq-endpoint", .help = "the frontend's ZeroMQ client API (with --api zmq)",
                              .env = "TESSERA_BENCH_ZMQ_ENDPOINT"});
  o.add(c.load.workload, {.name = "workload", .help = "request mix", .env = "TESSERA_BENCH_WORKLOAD",
                          .choices = {"random", "shared-prefix", "multi-turn", "rag"}});
  o.add(c.load.num_requests, {.name = "num-requests", .help = "requests (multi-turn: turns in total)",
                              .env = "TESSERA_BENCH_NUM_REQUESTS", .min = 1, .max = 1 << 24});
  o.add(c.load.concurrency, {.name = "concurrency", .help = "requests in flight (closed loop)",
                             .env = "TESSERA_BENCH_CONCURRENCY", .min = 1, .max = 4096});
  o.add(c.load.request_rate, {.name = "request-rate",
                              .help = "Poisson arrivals per second (open loop); 0 = use --concurrency",
                              .env = "TESSERA_BENCH_REQUEST_RATE", .min = 0, .max = 1e6});
  o.add(c.load.max_tokens, {.name = "max-tokens", .help = "tokens generated per request",
                            .env = "TESSERA_BENCH_MAX_TOKENS", .min = 1, .max = 1 << 20});
  o.add(c.load.prompt_words, {.name = "prompt-words", .help = "words per prompt (random) or per question / user turn",
                              .env = "TESSERA_BENCH_PROMPT_WORDS", .min = 1, .max = 1 << 20});
  o.add(c.load.num_groups, {.name = "num-groups", .help = "shared-prefix: distinct system prompts",
                            .env = "TESSERA_BENCH_NUM_GROUPS", .min = 1, .max = 1 << 20});
  o.add(c.load.system_words, {.name = "system-words", .help = "shared-prefix: words per system prompt",
                              .env = "TESSERA_BENCH_SYSTEM_WORDS", .min = 1, .max = 1 << 20});
  o.add(c.load.turns, {.name = "turns", .help = "multi-turn: turns per conversation", .env = "TESSERA_BENCH_TURNS",
                       .min = 1, .max = 1024});
  o.add(c.load.rag_pool, {.name = "rag-pool", .help = "rag: distinct documents requests draw from",
                          .env = "TESSERA_BENCH_RAG_POOL", .min = 1, .max = 65536});
  o.add(c.load.rag_k, {.name = "rag-k", .help = "rag: documents per request (drawn from the pool, shuffled; at most 64)",
                       .env = "TESSERA_BENCH_RAG_K", .min = 1, .max = 64});
  o.add(c.load.rag_doc_words, {.name = "rag-doc-words", .help = "rag: words per document",
                               .env = "TESSERA_BENCH_RAG_DOC_WORDS", .min = 1, .max = 1 << 20});
  o.add(c.load.rag_modes, {.name = "rag-modes",
                           .help = "rag: caching modes to run, in order, against the same cluster: blend (documents in "
                                   "`documents`: CacheBlend), prefix (the same text in the prompt: prefix cache only), "
                                   "none (a unique cache_salt per request: nothing reused)",
                           .env = "TESSERA_BENCH_RAG_MODES"});
  o.add(c.load.rag_warmup, {.name = "rag-warmup",
                            .help = "rag: before each mode's measured requests, unmeasured ones with each pool document "
                                    "first (none: one request), so the pool is cached as in steady state",
                            .env = "TESSERA_BENCH_RAG_WARMUP"});
  o.add(c.load.recompute_ratio, {.name = "recompute-ratio",
                                 .help = "rag: the blend mode's recompute_ratio; < 0 = the worker's "
                                         "--blend-recompute-ratio",
                                 .env = "TESSERA_BENCH_RECOMPUTE_RATIO", .min = -1, .max = 1});
  o.add(c.load.scheduler_metrics_port,
        {.name = "scheduler-metrics-port",
         .help = "rag: the scheduler's /metrics port on --host (tessera up: scheduler-port + 2): report blended prefill "
                 "steps and CacheBlend fallbacks per request (tessera_scheduler_blend_*); 0 = not read",
         .env = "TESSERA_BENCH_SCHEDULER_METRICS_PORT", .min = 0, .max = 65535});
  o.add(c.load.cpu_pids, {.name = "cpu-pids",
                          .help = "comma-separated pids of local processes (e.g. the workers) whose CPU time is summed "
                                  "over each run and reported per request (\"\" = none)",
                          .env = "TESSERA_BENCH_CPU_PIDS"});
  o.add(c.load.ignore_eos, {.name = "ignore-eos", .help = "always generate max-tokens tokens",
                            .env = "TESSERA_BENCH_IGNORE_EOS"});
  o.add(c.load.seed, {.name = "seed", .help = "workload generator seed", .env = "TESSERA_BENCH_SEED", .min = 0,
                      .max = 1e18});
  o.add(c.load.timeout_ms, {.name = "timeout-ms", .help = "per-request timeout", .env = "TESSERA_BENCH_TIMEOUT_MS",
                            .min = 100, .max = 86400000});
  o.add(c.load.progress_s, {.name = "progress-s",
                            .help = "print a progress line (requests done, failures, tokens/s) on stderr this often; 0 "
                                    "= none",
                            .env = "TESSERA_BENCH_PROGRESS_S", .min = 0, .max = 3600});
  o.add(c.curve_dir, {.name = "curve-dir",
                      .help = "with --api zmq against a frontend run with --zmq-curve: a key directory holding "
                              "client.key_secret and frontend.key (docs/security.md); \"\" = plain",
                      .env = "TESSERA_BENCH_CURVE_DIR"});
  o.add(c.json, {.name = "json", .help = "write the JSON report here (\"-\" = stdout)", .env = "TESSERA_BENCH_JSON"});
}

// Writes the report's JSON to `path` ("" = none); false when it cannot.
bool write_json(const std::string& path, const std::string& text) {
  if (path.empty()) return true;
  std::ofstream out(path);
  out << text << "\n";
  if (!out) std::fprintf(stderr, "tessera bench: cannot write %s\n", path.c_str());
  return static_cast<bool>(out);
}

int run_rag_bench(const bench::LoadConfig& c, const std::string& json_path) {
  auto rep = bench::run_rag(c);
  if (!rep.ok()) {
    std::fprintf(stderr, "tessera bench: %s\n", rep.error().to_string().c_str());
    return 2;
  }
  if (json_path == "-") {
    std::printf("%s\n", bench::rag_report_json(*rep).c_str());
  } else {
    std::printf("%s", bench::rag_report_table(*rep).c_str());
    if (!write_json(json_path, bench::rag_report_json(*rep))) return 1;
  }
  for (const auto& m : rep->modes)
    if (m.load.failed > 0) return 1;
  return 0;
}

int run_bench(const std::vector<std::string>& args) {
  BenchArgs args_;
  config::Options o("tessera bench", "bench");
  declare_bench_options(o, args_);
  o.describe("Load generator against a running cluster (e.g. `tessera up`): TTFT/TPOT/ITL percentiles, throughput, "
             "prefix-cache hit rate");
  if (auto exit_code = config::parse_command_line(o, args)) return *exit_code;
  if (!args_.curve_dir.empty()) {
    auto keys = curve::Keys::load({.dir = args_.curve_dir}, curve::Role::kClient);
    auto to_frontend = keys.ok() ? keys->client_of(curve::Role::kFrontend) : keys.error();
    if (!to_frontend.ok()) {
      std::fprintf(stderr, "tessera bench: --curve-dir: %s\n", to_frontend.error().message.c_str());
      return 2;
    }
    args_.load.curve = *to_frontend;
  }
  const bench::LoadConfig& c = args_.load;
  if (c.workload == "rag") return run_rag_bench(c, args_.json);
  auto rep = bench::run_load(c);
  if (!rep.ok()) {
    std::fprintf(stderr, "tessera bench: %s\n", rep.error().to_string().c_str());
    return 2;
  }
  const std::string& json_path = args_.json;
  if (json_path == "-") {
    std::printf("%s\n", bench::report_json(*rep).c_str());
  } else {
    std::printf("%s", bench::report_table(*rep).c_str());
    if (!write_json(json_path, bench::report_json(*rep))) return 1;
  }
  return rep->failed == 0 ? 0 : 1;
}

}  // namespace

TESSERA_COMMAND("bench", "load generator over the HTTP API: TTFT/TPOT/ITL percentiles, throughput, prefix-cache hit rate", run_bench);

}  // namespace tessera::tools
