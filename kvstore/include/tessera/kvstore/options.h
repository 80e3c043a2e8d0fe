// tessera-kvstore's option table, declared once and bound to the members below (or of the
// StoreConfig / ServerConfig they hold), whose initializers are the defaults. The binary parses
// it (kvstore/src/main.cpp) and `tessera up` reads it to forward the options it shares.
// (Inline here rather than in a .cpp: kvstore/CMakeLists.txt is being split; move it to
// kvstore/src/options.cpp in the service library once that settles.)
//
// Ownership: declare_options() binds `options` to members of `config`, which must outlive it.
#pragma once

#include <string>

#include "tessera/common/config.h"
#include "tessera/common/curve.h"
#include "tessera/kvstore/server.h"
#include "tessera/kvstore/store.h"

namespace tessera::kvstore {

struct KvstoreOptions {
  StoreConfig store;   // store.redis is set from `redis` by the binary
  ServerConfig server;
  std::string redis;   // host:port of the L2; "" = L1 only
  // RedisConfig::get_many_inflight for every shard: "auto" or a fixed KiB (parse_inflight_kb).
  std::string redis_get_many_inflight_kb = "auto";
  int redis_get_many_inflight_min_kb = 256;   // auto's floor
  int redis_get_many_inflight_max_kb = 8192;  // auto's ceiling
  std::string metrics_host = "127.0.0.1";  // GET /metrics and /health over HTTP
  int metrics_port = 0;                    // 0 = any free port (in the listening line), -1 = off
};

inline void declare_options(config::Options& o, KvstoreOptions& c) {
  o.add(c.server.listen, {.name = "listen", .help = "ZeroMQ ROUTER endpoint (tcp://host:* picks a free port)",
                          .env = "TESSERA_KVSTORE_LISTEN"});
  o.add(c.redis, {.name = "redis", .help = "Redis host:port for L2, or a comma-separated list of them: the L2 is spread over those shards by "
                                          "consistent hashing (every node must list the same set); empty = L1 only", .env = "TESSERA_KVSTORE_REDIS"});
  o.add(c.redis_get_many_inflight_kb,
        {.name = "redis-get-many-inflight-kb",
         .help = "bytes of Redis replies a get_many keeps in flight per shard (pipelined GETs): auto = 2 x the "
                 "link's bandwidth-delay product plus a value, measured per shard (RTT and delivery rate), between "
                 "--redis-get-many-inflight-min-kb and -max-kb; or a fixed KiB, 0..1048576 (0 = one round trip "
                 "per key). docs/kvstore.md \"get_many's in-flight budget\"",
         .env = "TESSERA_KVSTORE_REDIS_GET_MANY_INFLIGHT_KB"});
  o.add(c.redis_get_many_inflight_min_kb,
        {.name = "redis-get-many-inflight-min-kb",
         .help = "auto's floor in KiB (and the budget before a shard's rate is measured): 256 was the loopback optimum",
         .env = "TESSERA_KVSTORE_REDIS_GET_MANY_INFLIGHT_MIN_KB", .min = 1, .max = 1048576});
  o.add(c.redis_get_many_inflight_max_kb,
        {.name = "redis-get-many-inflight-max-kb",
         .help = "auto's ceiling in KiB: a cap on the replies one get_many may have queued in Redis and the socket "
                 "buffers per shard (>= the floor)",
         .env = "TESSERA_KVSTORE_REDIS_GET_MANY_INFLIGHT_MAX_KB", .min = 1, .max = 1048576});
  o.add(c.store.l1.max_bytes, {.name = "l1-max-bytes", .help = "L1 bound in blob bytes",
                               .env = "TESSERA_KVSTORE_L1_MAX_BYTES", .min = 0});
  o.add(c.store.l1.max_entries, {.name = "l1-max-entries", .help = "L1 bound in entries",
                                 .env = "TESSERA_KVSTORE_L1_MAX_ENTRIES", .min = 0});
  o.add(c.store.l1.per_user_max_bytes, {.name = "per-user-max-bytes",
                                        .help = "L1 quota of one user, in blob bytes (<= l1-max-bytes)",
                                        .env = "TESSERA_KVSTORE_PER_USER_MAX_BYTES", .min = 0});
  o.add(c.store.default_ttl_s, {.name = "ttl", .help = "default time to live of a blob in seconds (L1 and Redis)",
                                .env = "TESSERA_KVSTORE_TTL", .min = 1, .max = 365.0 * 24 * 3600});
  o.add(c.store.secret, {.name = "hmac-secret",
                         .help = "secret for Redis key names and value MACs (required with --redis)",
                         .env = "TESSERA_KVSTORE_SECRET"});
  o.add(c.server.threads, {.name = "threads", .help = "worker threads for Redis I/O and large blobs",
                           .env = "TESSERA_KVSTORE_THREADS", .min = 1, .max = 256});
  o.add(c.store.max_blob_bytes, {.name = "max-blob-bytes", .help = "largest blob accepted by put",
                                 .env = "TESSERA_KVSTORE_MAX_BLOB_BYTES", .min = 64, .max = 2147483647.0});
  o.add(c.metrics_host, {.name = "metrics-host",
                         .help = "address of the HTTP /metrics and /health endpoint (IPv4 or IPv6; :: = every "
                                 "address, both)",
                         .env = "TESSERA_KVSTORE_METRICS_HOST"});
  o.add(c.metrics_port, {.name = "metrics-port",
                         .help = "port of that endpoint (0 = any free port, printed in the listening line; -1 = off)",
                         .env = "TESSERA_KVSTORE_METRICS_PORT", .min = -1, .max = 65535});
  curve::declare_options(o, c.server.curve, curve::Role::kKvstore);
}

}  // namespace tessera::kvstore
