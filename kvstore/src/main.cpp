// tessera-kvstore: serves compressed K/V blobs (docs/kvstore.md). Options are declared once
// below; --help, flags, the config file ([kvstore] section) and the environment come from it.
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/common/log.h"
#include "tessera/kvstore/server.h"
#include "tessera/kvstore/store.h"

namespace {

std::atomic<tessera::kvstore::Server*> g_server{nullptr};

extern "C" void on_signal(int) {
  if (auto* s = g_server.load()) s->stop();
}

void declare(tessera::config::Options& o) {
  using tessera::config::Type;
  o.add({.name = "listen", .type = Type::kString, .default_value = "tcp://127.0.0.1:5557",
         .help = "ZeroMQ ROUTER endpoint (tcp://host:* picks a free port)", .env = "TESSERA_KVSTORE_LISTEN"});
  o.add({.name = "redis", .type = Type::kString, .default_value = "",
         .help = "Redis host:port for L2; empty = L1 only", .env = "TESSERA_KVSTORE_REDIS"});
  o.add({.name = "l1-max-bytes", .type = Type::kInt, .default_value = "1073741824",
         .help = "L1 bound in blob bytes", .env = "TESSERA_KVSTORE_L1_MAX_BYTES", .min = 0});
  o.add({.name = "l1-max-entries", .type = Type::kInt, .default_value = "4096",
         .help = "L1 bound in entries", .env = "TESSERA_KVSTORE_L1_MAX_ENTRIES", .min = 0});
  o.add({.name = "per-user-max-bytes", .type = Type::kInt, .default_value = "67108864",
         .help = "L1 quota of one user, in blob bytes (<= l1-max-bytes)", .env = "TESSERA_KVSTORE_PER_USER_MAX_BYTES",
         .min = 0});
  o.add({.name = "ttl", .type = Type::kInt, .default_value = "86400",
         .help = "default time to live of a blob in seconds (L1 and Redis)", .env = "TESSERA_KVSTORE_TTL", .min = 1,
         .max = 365.0 * 24 * 3600});
  o.add({.name = "hmac-secret", .type = Type::kString, .default_value = "",
         .help = "secret for Redis key names and value MACs (required with --redis)", .env = "TESSERA_KVSTORE_SECRET"});
  o.add({.name = "threads", .type = Type::kInt, .default_value = "4",
         .help = "worker threads for Redis I/O and large blobs", .env = "TESSERA_KVSTORE_THREADS", .min = 1, .max = 256});
  o.add({.name = "max-blob-bytes", .type = Type::kInt, .default_value = "268435456",
         .help = "largest blob accepted by put", .env = "TESSERA_KVSTORE_MAX_BLOB_BYTES", .min = 64,
         .max = 2147483647.0});
  o.add({.name = "log-level", .type = Type::kString, .default_value = "info", .help = "debug|info|warn|error|off",
         .env = "TESSERA_LOG_LEVEL", .choices = {"debug", "info", "warn", "error", "off"}});
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  log::set_component("kvstore");
  config::Options opts("tessera-kvstore", "kvstore");
  declare(opts);
  const Status parsed = opts.parse(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.ok()) {
    std::fprintf(stderr, "tessera-kvstore: %s\n", parsed.error().to_string().c_str());
    return 2;
  }
  if (opts.help_requested()) {
    std::fputs(opts.help().c_str(), stdout);
    return 0;
  }
  log::set_level(opts.get("log-level"));

  kvstore::StoreConfig sc;
  sc.l1.max_bytes = static_cast<uint64_t>(opts.get_int("l1-max-bytes"));
  sc.l1.max_entries = static_cast<uint64_t>(opts.get_int("l1-max-entries"));
  sc.l1.per_user_max_bytes = static_cast<uint64_t>(opts.get_int("per-user-max-bytes"));
  sc.default_ttl_s = static_cast<uint32_t>(opts.get_int("ttl"));
  sc.max_blob_bytes = static_cast<uint64_t>(opts.get_int("max-blob-bytes"));
  sc.secret = opts.get("hmac-secret");
  if (const std::string redis = opts.get("redis"); !redis.empty()) {
    auto hp = kvstore::parse_host_port(redis);
    if (!hp.ok()) {
      std::fprintf(stderr, "tessera-kvstore: --redis: %s\n", hp.error().message.c_str());
      return 2;
    }
    sc.redis = kvstore::RedisConfig{.host = hp->first, .port = hp->second};
  }
  auto store = kvstore::Store::create(sc);
  if (!store.ok()) {
    std::fprintf(stderr, "tessera-kvstore: %s\n", store.error().to_string().c_str());
    return 2;
  }
  kvstore::ServerConfig cfg;
  cfg.listen = opts.get("listen");
  cfg.threads = static_cast<int>(opts.get_int("threads"));
  cfg.max_message_bytes = static_cast<size_t>(sc.max_blob_bytes) + 4096;
  auto server = kvstore::Server::create(cfg, **store);
  if (!server.ok()) {
    std::fprintf(stderr, "tessera-kvstore: %s\n", server.error().to_string().c_str());
    return 1;
  }
  g_server.store(server->get());
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // Tests and `tessera up` read this line to learn the bound endpoint.
  std::printf("tessera-kvstore listening on %s redis=%s\n", (*server)->endpoint().c_str(),
              sc.redis ? (sc.redis->host + ":" + std::to_string(sc.redis->port)).c_str() : "off");
  std::fflush(stdout);
  const Status st = (*server)->run();
  g_server.store(nullptr);
  if (!st.ok()) {
    std::fprintf(stderr, "tessera-kvstore: %s\n", st.error().to_string().c_str());
    return 1;
  }
  return 0;
}
