// tessera-kvstore: serves compressed K/V blobs (docs/kvstore.md). Options are declared once in
// tessera/kvstore/options.h; --help, flags, the config file ([kvstore] section) and the
// environment come from it.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/common/log.h"
#include "tessera/common/metrics_http.h"
#include "tessera/common/signals.h"
#include "tessera/kvstore/options.h"
#include "tessera/kvstore/server.h"
#include "tessera/kvstore/store.h"

namespace {


}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  log::set_component("kvstore");
  kvstore::KvstoreOptions config;
  config::Options opts("tessera-kvstore", "kvstore");
  kvstore::declare_options(opts, config);
  opts.describe("Serves compressed K/V blobs (preference K/V) from an in-memory L1 and an optional Redis L2");
  if (auto exit_code = config::parse_command_line(opts, std::vector<std::string>(argv + 1, argv + argc)))
    return *exit_code;
  signals::install();  // before any thread starts (signals.h)

  kvstore::StoreConfig& sc = config.store;
  // --redis host:port[,host:port...]: one L2 shard each (docs/kvstore.md, "Several Redis shards").
  std::string redis_list;  // for the listening line
  auto fixed = kvstore::parse_inflight_kb(config.redis_get_many_inflight_kb);
  if (!fixed.ok()) {
    std::fprintf(stderr, "tessera-kvstore: --redis-get-many-inflight-kb: %s\n", fixed.error().message.c_str());
    return 2;
  }
  if (config.redis_get_many_inflight_min_kb > config.redis_get_many_inflight_max_kb) {
    std::fprintf(stderr, "tessera-kvstore: --redis-get-many-inflight-min-kb (%d) is above --redis-get-many-inflight-max-kb (%d)\n",
                 config.redis_get_many_inflight_min_kb, config.redis_get_many_inflight_max_kb);
    return 2;
  }
  const kvstore::InflightBudgetConfig inflight{
      .auto_tune = !fixed->has_value(), .fixed_bytes = fixed->value_or(0),
      .min_bytes = static_cast<uint64_t>(config.redis_get_many_inflight_min_kb) << 10,
      .max_bytes = static_cast<uint64_t>(config.redis_get_many_inflight_max_kb) << 10};
  for (const std::string& redis : config::detail::split_list(config.redis)) {
    auto hp = kvstore::parse_host_port(redis);
    if (!hp.ok()) {
      std::fprintf(stderr, "tessera-kvstore: --redis: %s\n", hp.error().message.c_str());
      return 2;
    }
    sc.redis_shards.push_back(kvstore::RedisConfig{
        .host = hp->first, .port = hp->second,
        .get_many_inflight = inflight});
    redis_list += (redis_list.empty() ? "" : ",") + hp->first + ":" + std::to_string(hp->second);
  }
  auto store = kvstore::Store::create(sc);
  if (!store.ok()) {
    std::fprintf(stderr, "tessera-kvstore: %s\n", store.error().to_string().c_str());
    return 2;
  }
  kvstore::ServerConfig& cfg = config.server;
  cfg.max_message_bytes = static_cast<size_t>(sc.max_blob_bytes) + 4096;
  auto server = kvstore::Server::create(cfg, **store);
  if (!server.ok()) {
    std::fprintf(stderr, "tessera-kvstore: %s\n", server.error().to_string().c_str());
    return 1;
  }
  kvstore::Server* raw = server->get();
  // GET /metrics (the same text as the `stats` message) and /health; /health reports Redis.
  std::unique_ptr<metrics_http::MetricsServer> metrics_server;
  if (config.metrics_port >= 0) {
    kvstore::Store* st = store->get();
    auto ms = metrics_http::MetricsServer::start(
        config.metrics_host, config.metrics_port,
        {.metrics = [raw] { return raw->metrics_text(); },
         .health = [st] {
           const char* redis = !st->l2_configured() ? "off"
                               : st->l2_up()        ? "up"
                               : st->l2_any_up()    ? "degraded"
                                                    : "down";
           return metrics_http::Answer{.status = 200, .body = std::string("{\"status\":\"ok\",\"redis\":\"") + redis + "\"}"};
         }});
    if (!ms.ok()) {
      std::fprintf(stderr, "tessera-kvstore: --metrics-port: %s\n", ms.error().to_string().c_str());
      return 1;
    }
    metrics_server = std::move(*ms);
  }
  signals::OnStop on_stop([raw](int) { raw->stop(); });
  // Tests and `tessera up` read this line to learn the bound endpoint.
  std::printf("tessera-kvstore listening on %s redis=%s metrics=%d\n", (*server)->endpoint().c_str(),
              redis_list.empty() ? "off" : redis_list.c_str(),
              metrics_server ? metrics_server->port() : -1);
  std::fflush(stdout);
  const Status st = (*server)->run();
  if (!st.ok()) {
    std::fprintf(stderr, "tessera-kvstore: %s\n", st.error().to_string().c_str());
    return 1;
  }
  return 0;
}
