// `tessera bench`: a load generator against a running cluster's HTTP or ZeroMQ API (bench/load.h):
// workloads random | shared-prefix | multi-turn, fixed concurrency or Poisson request rate,
// TTFT / TPOT / ITL percentiles, throughput and the prefix-cache hit rate (from the responses'
// usage and from the frontend's /metrics), as a table and as JSON.
#include <cstdio>
#include <fstream>

#include "bench/load.h"
#include "tessera/common/config.h"
#include "tessera/tools/command.h"

namespace tessera::tools {
namespace {

void declare_bench_options(config::Options& o) {
  using config::Type;
  o.add({.name = "host", .type = Type::kString, .default_value = "127.0.0.1", .help = "frontend address", .env = "TESSERA_BENCH_HOST"});
  o.add({.name = "port", .type = Type::kInt, .default_value = "8000", .help = "frontend HTTP port", .env = "TESSERA_BENCH_PORT",
         .min = 1, .max = 65535});
  o.add({.name = "api", .type = Type::kString, .default_value = "http",
         .help = "http (OpenAI API, SSE) or zmq (the frontend's msgpack client API)", .env = "TESSERA_BENCH_API",
         .choices = {"http", "zmq"}});
  o.add({.name = "zmq-endpoint", .type = Type::kString, .default_value = "tcp://127.0.0.1:8001",
         .help = "the frontend's ZeroMQ client API (with --api zmq)", .env = "TESSERA_BENCH_ZMQ_ENDPOINT"});
  o.add({.name = "workload", .type = Type::kString, .default_value = "random", .help = "request mix",
         .env = "TESSERA_BENCH_WORKLOAD", .choices = {"random", "shared-prefix", "multi-turn"}});
  o.add({.name = "num-requests", .type = Type::kInt, .default_value = "64", .help = "requests (multi-turn: turns in total)",
         .env = "TESSERA_BENCH_NUM_REQUESTS", .min = 1, .max = 1 << 24});
  o.add({.name = "concurrency", .type = Type::kInt, .default_value = "8", .help = "requests in flight (closed loop)",
         .env = "TESSERA_BENCH_CONCURRENCY", .min = 1, .max = 4096});
  o.add({.name = "request-rate", .type = Type::kFloat, .default_value = "0",
         .help = "Poisson arrivals per second (open loop); 0 = use --concurrency", .env = "TESSERA_BENCH_REQUEST_RATE", .min = 0,
         .max = 1e6});
  o.add({.name = "max-tokens", .type = Type::kInt, .default_value = "64", .help = "tokens generated per request",
         .env = "TESSERA_BENCH_MAX_TOKENS", .min = 1, .max = 1 << 20});
  o.add({.name = "prompt-words", .type = Type::kInt, .default_value = "64",
         .help = "words per prompt (random) or per question / user turn", .env = "TESSERA_BENCH_PROMPT_WORDS", .min = 1,
         .max = 1 << 20});
  o.add({.name = "num-groups", .type = Type::kInt, .default_value = "4", .help = "shared-prefix: distinct system prompts",
         .env = "TESSERA_BENCH_NUM_GROUPS", .min = 1, .max = 1 << 20});
  o.add({.name = "system-words", .type = Type::kInt, .default_value = "400", .help = "shared-prefix: words per system prompt",
         .env = "TESSERA_BENCH_SYSTEM_WORDS", .min = 1, .max = 1 << 20});
  o.add({.name = "turns", .type = Type::kInt, .default_value = "4", .help = "multi-turn: turns per conversation",
         .env = "TESSERA_BENCH_TURNS", .min = 1, .max = 1024});
  o.add({.name = "ignore-eos", .type = Type::kBool, .default_value = "true", .help = "always generate max-tokens tokens",
         .env = "TESSERA_BENCH_IGNORE_EOS"});
  o.add({.name = "seed", .type = Type::kInt, .default_value = "1", .help = "workload generator seed", .env = "TESSERA_BENCH_SEED",
         .min = 0, .max = 1e18});
  o.add({.name = "timeout-ms", .type = Type::kInt, .default_value = "600000", .help = "per-request timeout",
         .env = "TESSERA_BENCH_TIMEOUT_MS", .min = 100, .max = 86400000});
  o.add({.name = "json", .type = Type::kString, .default_value = "", .help = "write the JSON report here (\"-\" = stdout)",
         .env = "TESSERA_BENCH_JSON"});
}

int run_bench(const std::vector<std::string>& args) {
  config::Options o("tessera bench", "bench");
  declare_bench_options(o);
  if (Status st = o.parse(args); !st.ok()) {
    std::fprintf(stderr, "tessera bench: %s\n", st.error().message.c_str());
    return 2;
  }
  if (o.help_requested()) {
    std::printf("usage: tessera bench [options]   (against a running cluster, e.g. `tessera up`)\n%s", o.help().c_str());
    return 0;
  }
  bench::LoadConfig c;
  c.host = o.get("host");
  c.port = static_cast<int>(o.get_int("port"));
  c.api = o.get("api");
  c.zmq_endpoint = o.get("zmq-endpoint");
  c.workload = o.get("workload");
  c.num_requests = static_cast<int>(o.get_int("num-requests"));
  c.concurrency = static_cast<int>(o.get_int("concurrency"));
  c.request_rate = o.get_float("request-rate");
  c.max_tokens = static_cast<int>(o.get_int("max-tokens"));
  c.prompt_words = static_cast<int>(o.get_int("prompt-words"));
  c.num_groups = static_cast<int>(o.get_int("num-groups"));
  c.system_words = static_cast<int>(o.get_int("system-words"));
  c.turns = static_cast<int>(o.get_int("turns"));
  c.ignore_eos = o.get_bool("ignore-eos");
  c.seed = static_cast<uint64_t>(o.get_int("seed"));
  c.timeout_ms = static_cast<int>(o.get_int("timeout-ms"));
  auto rep = bench::run_load(c);
  if (!rep.ok()) {
    std::fprintf(stderr, "tessera bench: %s\n", rep.error().to_string().c_str());
    return 2;
  }
  const std::string json_path = o.get("json");
  if (json_path == "-") {
    std::printf("%s\n", bench::report_json(*rep).c_str());
  } else {
    std::printf("%s", bench::report_table(*rep).c_str());
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << bench::report_json(*rep) << "\n";
      if (!out) {
        std::fprintf(stderr, "tessera bench: cannot write %s\n", json_path.c_str());
        return 1;
      }
    }
  }
  return rep->failed == 0 ? 0 : 1;
}

}  // namespace

TESSERA_COMMAND("bench", "load generator over the HTTP API: TTFT/TPOT/ITL percentiles, throughput, prefix-cache hit rate", run_bench);

}  // namespace tessera::tools
