// kvstore benchmark. Prints markdown tables for docs/BENCHMARKS.md:
//  1. per codec: compression ratio, encode/decode time, K/V error and attention-output error,
//     on K/V shaped like a 200-token preference of a 135M model (30 layers, 3 KV heads,
//     head_dim 64) with realistic statistics (tests/unit/kvstore/synthetic_kv.h);
//  2. put/get latency through a tessera-kvstore Server on loopback ZeroMQ with the C++ Client:
//     L1 (memory) and L2 (Redis, L1 disabled so every get goes to Redis).
//
//  3. get_many of --get-many-keys page-sized blobs with a cold L1 (Redis only).
//
//   kvstore_bench [--iters N] [--tokens T] [--dtype f16|bf16|f32] [--no-redis] [--get-many-keys K] [--only-get-many]
//                 [--redis HOST:PORT] [--get-many-inflight-kb auto|KB] [--get-many-inflight-max-kb KB]
// Redis: a private redis-server on a free loopback port (tests/support RedisServer), or with
// --redis (get_many rows only) a running one, e.g. on another host (docs/BENCHMARKS.md "get_many
// across hosts"; its INFO is read with redis-cli). --get-many-inflight-kb sets the store's
// RedisConfig::get_many_inflight as tessera-kvstore's --redis-get-many-inflight-kb does (auto =
// self-tuning, inflight_budget.h; KB fixed, 0 = one GET round trip per key, the unpipelined
// baseline); the get_many rows end with the budget, RTT and rate the shard's estimator reached.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "kv_error.h"
#include "synthetic_kv.h"
#include "tessera/common/config.h"
#include "tessera/common/log.h"
#include "tessera/kvstore/blob.h"
#include "tessera/kvstore/client.h"
#include "tessera/kvstore/server.h"
#include "tessera/kvstore/store.h"
#include "tessera/testing/redis_server.h"

namespace {

using namespace tessera;
using namespace tessera::kvstore;
using Clock = std::chrono::steady_clock;

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Stats {
  double p50 = 0, p99 = 0, mean = 0;
};
Stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, static_cast<size_t>(static_cast<double>(v.size()) * 0.99))];
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  return s;
}

// Runs a Server on its own thread for the lifetime of the object.
struct LocalService {
  std::unique_ptr<Store> store;
  std::unique_ptr<Server> server;
  std::thread thread;
  explicit LocalService(StoreConfig sc) {
    store = Store::create(std::move(sc)).value();
    server = Server::create({.listen = "tcp://127.0.0.1:*", .threads = 2, .curve = {.insecure = true}}, *store).value();
    thread = std::thread([this] { (void)server->run(); });
  }
  ~LocalService() {
    server->stop();
    thread.join();
  }
};

// The Redis server the L2 rows use: a private one (tests/support) or a running one (--redis).
struct RedisTarget {
  std::string host;
  int port = 0;
  const tessera::testing::RedisServer* local = nullptr;
  // One command's reply as text (INFO only is needed).
  std::string command(const std::vector<std::string>& argv) const {
    if (local != nullptr) return local->command(argv);
    std::string cmd = "redis-cli -h " + host + " -p " + std::to_string(port);
    for (const std::string& a : argv) cmd += " " + a;
    std::string out;
    if (std::FILE* f = popen(cmd.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, n);
      pclose(f);
    }
    return out;
  }
};

// A store with L1 off, so every get goes to the Redis server r.
StoreConfig l2_only(const RedisTarget& r, const InflightBudgetConfig& inflight = {}) {
  StoreConfig sc;
  sc.l1.max_entries = 0;
  sc.redis = RedisConfig{.host = r.host, .port = r.port, .get_many_inflight = inflight};
  sc.secret = "bench-secret";
  return sc;
}

void latency_rows(const char* tier, Client& c, const std::string& blob, int iters) {
  std::vector<double> put, get;
  for (int i = 0; i < iters; ++i) {
    const BlobKey key{0x135, "user" + std::to_string(i % 8), "pref" + std::to_string(i)};
    auto t0 = Clock::now();
    auto p = c.put(key, blob);
    put.push_back(ms_since(t0));
    if (!p.ok()) {
      std::fprintf(stderr, "put failed: %s\n", p.error().to_string().c_str());
      std::exit(1);
    }
    t0 = Clock::now();
    auto g = c.get(key);
    get.push_back(ms_since(t0));
    if (!g.ok() || !g->found || g->blob.size() != blob.size()) {
      std::fprintf(stderr, "get failed (%s)\n", g.ok() ? "miss" : g.error().to_string().c_str());
      std::exit(1);
    }
    // Decode as a worker would (checksum + decompress/dequantize).
  }
  const Stats p = summarize(put), g = summarize(get);
  std::printf("| %s | %.2f MB | %.2f | %.2f | %.2f | %.2f |\n", tier, static_cast<double>(blob.size()) / 1e6, p.p50,
              p.p99, g.p50, g.p99);
}

// get_many of `keys` page-sized blobs with a cold L1 (the service's L1 is off): every key is an
// L1 miss fetched from Redis (before pipelining: one GET round trip each; now one MGET per shard).
double process_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// utime + stime of another process (/proc/PID/stat), ms; 0 when unreadable.
double other_cpu_ms(long pid) {
  if (pid <= 0) return 0.0;
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return 0.0;
  char buf[1024] = {};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  const char* p = std::strrchr(buf, ')');  // fields after the command name
  if (n == 0 || p == nullptr) return 0.0;
  unsigned long utime = 0, stime = 0;
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2) return 0.0;
  return static_cast<double>(utime + stime) * 1e3 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A numeric field of redis INFO (e.g. "process_id", "total_reads_processed"); 0 when absent.
long redis_info(const RedisTarget& r, const char* section, const std::string& field) {
  const std::string info = r.command({"INFO", section});
  const size_t at = info.find(field + ":");
  return at == std::string::npos ? 0 : std::atol(info.c_str() + at + field.size() + 1);
}

// Redis read events per call (total_reads_processed: one per batch of commands read from a
// socket, so about the round trips) and CPU, besides the wall time.
// The value of the first sample of `name` in Prometheus text (0 when absent).
double metric_value(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + "{");
  if (at == std::string::npos) return 0.0;
  const size_t sp = text.find("} ", at);
  return sp == std::string::npos ? 0.0 : std::atof(text.c_str() + sp + 2);
}

void get_many_rows(const char* what, Client& c, const std::string& blob, int keys, int iters, const RedisTarget& rs,
                   const Store& store) {
  const long redis = redis_info(rs, "server", "process_id");
  std::vector<std::string> hashes;
  for (int i = 0; i < keys; ++i) {
    hashes.push_back("page" + std::to_string(i));
    if (!c.put({0x135, "offload", hashes.back()}, blob).ok()) {
      std::fprintf(stderr, "put failed\n");
      std::exit(1);
    }
  }
  std::vector<double> wall;
  const long reads0 = redis_info(rs, "stats", "total_reads_processed");
  const double cpu0 = process_cpu_ms(), redis0 = other_cpu_ms(redis);
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    auto g = c.get_many(0x135, "offload", hashes);
    wall.push_back(ms_since(t0));
    if (!g.ok() || g->size() != hashes.size() || !g->back().found || g->back().tier != Tier::kL2) {
      std::fprintf(stderr, "get_many failed (%s)\n", g.ok() ? "miss or not from L2" : g.error().to_string().c_str());
      std::exit(1);
    }
  }
  const double cpu = (process_cpu_ms() - cpu0) / iters, redis_cpu = (other_cpu_ms(redis) - redis0) / iters;
  const double reads = static_cast<double>(redis_info(rs, "stats", "total_reads_processed") - reads0 - 1) / iters;  // less INFO's own
  const Stats w = summarize(wall);
  const std::string m = store.metrics_text();
  std::printf("| %s | %d x %.1f KB | %.1f | %.2f | %.2f | %.2f | %.2f | %.0f / %.3f / %.0f |\n", what, keys,
              static_cast<double>(blob.size()) / 1e3, reads, w.p50, w.p99, cpu, redis_cpu,
              metric_value(m, "tessera_kvstore_redis_shard_get_many_inflight_bytes") / 1024.0,
              metric_value(m, "tessera_kvstore_redis_shard_rtt_seconds") * 1e3,
              metric_value(m, "tessera_kvstore_redis_shard_delivery_rate_bytes_per_second") / 1e6);
}

// Offload-sized pages (16 tokens) fetched by one get_many, as a worker's reload does.
void get_many_table(Client& c, int keys, int iters, const RedisTarget& redis, const Store& store) {
  const std::string small =
      encode_blob(kvstore::testing::synthetic_kv(DType::kF16, {5, 16, 4, 8}, 0x135, 7), {.codec = Codec::kZstd}).value();
  const std::string page =
      encode_blob(kvstore::testing::synthetic_kv(DType::kF16, {30, 16, 3, 64}, 0x135, 8), {.codec = Codec::kInt8}).value();
  std::printf("\nget_many with a cold L1 (L1 off, one Redis; %d iterations, ms)\n\n", iters);
  std::printf("| page | keys x blob | Redis read events per call | wall p50 | wall p99 | CPU ms per call (client + kvstore threads) | "
              "redis-server CPU ms per call | in flight KiB / RTT ms / rate MB/s after the row |\n"
              "|---|---|---|---|---|---|---|---|\n");
  get_many_rows("stories260K-sized, zstd", c, small, keys, iters, redis, store);
  get_many_rows("SmolLM2-135M-sized, int8", c, page, keys, iters, redis, store);
}

}  // namespace

struct Args {
  int iters = 50;
  uint32_t tokens = 200;
  DType dtype = DType::kF16;
  bool no_redis = false;
  int get_many_keys = 64;
  bool only_get_many = false;
  std::string redis;              // HOST:PORT of a running redis-server (get_many rows); "" = a private one
  std::string get_many_inflight_kb = "auto";  // as tessera-kvstore --redis-get-many-inflight-kb
  int get_many_inflight_max_kb = 8192;
};

int main(int argc, char** argv) {
  Args args;
  config::Options table("kvstore_bench", "kvstore-bench");
  table.add(args.iters, {.name = "iters", .help = "requests per latency row", .min = 1, .max = 1 << 20});
  table.add(args.tokens, {.name = "tokens", .help = "tokens of the synthetic K/V", .min = 1, .max = 1 << 20});
  table.add({.name = "dtype", .help = "element type of the synthetic K/V", .choices = {"f16", "bf16", "f32"}},
            dtype_name(args.dtype), [&args](const std::string& d) {
              args.dtype = d == "f32" ? DType::kF32 : d == "bf16" ? DType::kBF16 : DType::kF16;
            });
  table.add(args.no_redis, {.name = "no-redis", .help = "skip the L2 (Redis) rows"});
  table.add(args.get_many_keys, {.name = "get-many-keys", .help = "keys per get_many in the cold-L1 get_many rows", .min = 1, .max = 256});
  table.add(args.only_get_many, {.name = "only-get-many", .help = "run only the cold-L1 get_many rows (needs Redis)"});
  table.add(args.redis, {.name = "redis", .help = "HOST:PORT of a running redis-server for the get_many rows (implies --only-get-many; "
                                                  "INFO read with redis-cli); default: a private one on loopback"});
  table.add(args.get_many_inflight_kb,
            {.name = "get-many-inflight-kb",
             .help = "get_many rows: Redis replies in flight per shard (RedisConfig::get_many_inflight): auto "
                     "(self-tuning) or KiB; 0 = one GET round trip per key (unpipelined baseline)"});
  table.add(args.get_many_inflight_max_kb, {.name = "get-many-inflight-max-kb", .help = "auto's ceiling in KiB",
                                            .min = 256, .max = 1 << 20});
  table.describe("kvstore codecs (ratio, error, speed) and put/get latency through the service, L1 and L2");
  if (auto exit_code = config::parse_command_line(table, std::vector<std::string>(argv + 1, argv + argc)))
    return *exit_code;
  const int iters = args.iters;
  const uint32_t tokens = args.tokens;
  const DType dtype = args.dtype;
  const bool redis = !args.no_redis;
  auto fixed = parse_inflight_kb(args.get_many_inflight_kb);
  if (!fixed.ok()) {
    std::fprintf(stderr, "--get-many-inflight-kb: %s\n", fixed.error().message.c_str());
    return 2;
  }
  const InflightBudgetConfig inflight{.auto_tune = !fixed->has_value(), .fixed_bytes = fixed->value_or(0),
                                      .max_bytes = static_cast<uint64_t>(args.get_many_inflight_max_kb) << 10};
  if (!args.redis.empty()) {
    auto hp = parse_host_port(args.redis);
    if (!hp.ok()) {
      std::fprintf(stderr, "--redis: %s\n", hp.error().to_string().c_str());
      return 1;
    }
    const RedisTarget target{.host = hp->first, .port = hp->second};
    LocalService svc(l2_only(target, inflight));
    auto c = Client::connect({.endpoint = svc.server->endpoint(), .timeout_ms = 30000}).value();
    get_many_table(*c, args.get_many_keys, iters, target, *svc.store);
    return 0;
  }
  if (args.only_get_many) {
    auto r = tessera::testing::RedisServer::start();
    if (r == nullptr) {
      std::fprintf(stderr, "no redis-server\n");
      return 1;
    }
    const RedisTarget target{.host = r->host(), .port = r->port(), .local = r.get()};
    LocalService svc(l2_only(target, inflight));
    auto c = Client::connect({.endpoint = svc.server->endpoint(), .timeout_ms = 30000}).value();
    get_many_table(*c, args.get_many_keys, iters, target, *svc.store);
    return 0;
  }
  const KvShape shape{30, tokens, 3, 64};
  const PackedKv kv = kvstore::testing::synthetic_kv(dtype, shape, 0x135, 42);
  std::printf("K/V: %u layers x %u tokens x %u kv heads x %u head_dim, %s, %.2f MB raw (K+V)\n\n", shape.n_layers,
              shape.n_tokens, shape.n_kv_heads, shape.head_dim, dtype_name(dtype),
              2.0 * static_cast<double>(kv.region_bytes()) / 1e6);
  std::printf("| codec | group | step | blob MB | ratio | encode ms | decode ms | decode to f32 ms | K/V rel RMS err | K/V max abs err | attn out rel err |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  struct C {
    Codec codec;
    uint32_t group;
    float step = 0.0f;  // kivi, tiered (tiered: group = the recent tokens)
  };
  std::string zstd_blob, int8_blob;
  for (const C& c : {C{Codec::kNone, 0}, C{Codec::kZstd, 0}, C{Codec::kInt8, 128}, C{Codec::kInt8, 64},
                     C{Codec::kInt8, 32}, C{Codec::kInt4, 128}, C{Codec::kInt4, 64}, C{Codec::kInt4, 32},
                     C{Codec::kKivi, 64, 0.125f}, C{Codec::kKivi, 64, 0.25f}, C{Codec::kKivi, 64, 0.5f},
                     C{Codec::kKivi, 128, 0.25f}, C{Codec::kKivi, 128, 0.5f}, C{Codec::kKivi, 128, 1.0f},
                     C{Codec::kTiered, 8, 0.05f}, C{Codec::kTiered, 8, 0.1f}, C{Codec::kTiered, 8, 0.2f},
                     C{Codec::kTiered, 8, 0.4f}, C{Codec::kTiered, 8, 0.8f}}) {
    const bool tiered = c.codec == Codec::kTiered;
    const EncodeOptions opts{.codec = c.codec, .group_size = c.group == 0 || tiered ? 64 : c.group,
                             .kivi_step = c.step > 0.0f && !tiered ? c.step : 0.25f,
                             .tiered_step = tiered ? c.step : 0.1f, .tiered_recent = tiered ? c.group : 8};
    CodecReport best = measure_codec(kv, opts).value();
    // Timings: thread CPU time, best of 5 (the build machine is shared and loaded).
    std::string blob;
    best.encode_ms = best.decode_ms = 1e30;
    double f32_ms = 1e30;
    for (int r = 0; r < 5; ++r) {
      double t0 = cpu_ms();
      blob = encode_blob(kv, opts).value();
      best.encode_ms = std::min(best.encode_ms, cpu_ms() - t0);
      t0 = cpu_ms();
      (void)decode_blob(blob).value();
      best.decode_ms = std::min(best.decode_ms, cpu_ms() - t0);
      t0 = cpu_ms();
      (void)decode_blob(blob, {.to_f32 = true}).value();
      f32_ms = std::min(f32_ms, cpu_ms() - t0);
    }
    const double attn = kvstore::testing::attention_output_rel_error(kv, decode_blob(blob).value(), 7);
    if (c.codec == Codec::kZstd) zstd_blob = blob;
    if (c.codec == Codec::kInt8 && c.group == 64) int8_blob = blob;
    char step[16] = "-";
    if (c.step > 0.0f) std::snprintf(step, sizeof(step), "%.3g", static_cast<double>(c.step));
    const std::string group = c.group == 0 ? "-" : tiered ? "recent " + std::to_string(c.group) : std::to_string(c.group);
    std::printf("| %s | %s | %s | %.2f | %.2f | %.1f | %.1f | %.1f | %.5f | %.4f | %.5f |\n", codec_name(c.codec),
                group.c_str(), step, static_cast<double>(best.encoded_bytes) / 1e6,
                best.ratio, best.encode_ms, best.decode_ms, f32_ms, best.relative_error, best.max_abs_error, attn);
  }

  std::printf("\nLatency through the service (C++ Client -> ZeroMQ loopback -> tessera-kvstore Server, %d iterations, ms)\n\n",
              iters);
  std::printf("| tier | blob | put p50 | put p99 | get p50 | get p99 |\n|---|---|---|---|---|---|\n");
  {
    LocalService svc(StoreConfig{});
    auto c = Client::connect({.endpoint = svc.server->endpoint(), .timeout_ms = 30000}).value();
    latency_rows("L1 zstd", *c, zstd_blob, iters);
    latency_rows("L1 int8", *c, int8_blob, iters);
  }
  if (redis) {
    auto r = tessera::testing::RedisServer::start();
    if (r == nullptr) {
      std::fprintf(stderr, "no redis-server; skipping L2 rows\n");
      return 0;
    }
    const RedisTarget target{.host = r->host(), .port = r->port(), .local = r.get()};
    LocalService svc(l2_only(target, inflight));
    auto c = Client::connect({.endpoint = svc.server->endpoint(), .timeout_ms = 30000}).value();
    latency_rows("L2 zstd", *c, zstd_blob, iters);
    latency_rows("L2 int8", *c, int8_blob, iters);
    get_many_table(*c, args.get_many_keys, iters, target, *svc.store);
  }
  return 0;
}
