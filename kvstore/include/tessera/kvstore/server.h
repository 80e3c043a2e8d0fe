// The tessera-kvstore service: a ZeroMQ ROUTER in front of a Store (store.h).
//
// Threads: one ROUTER thread owns the socket. It answers at once what needs no I/O — stats,
// and get/exists that hit L1 — and hands everything else (put, L1 misses that go to Redis,
// delete, invalidate_user, clear) and every large request (> 64 KiB, decoded off the socket
// thread) to a pool of `threads` workers through a bounded queue. Workers send their replies
// back over an inproc PUSH/PULL pair; the ROUTER thread forwards them. So a multi-megabyte put
// or a slow Redis never delays another client's L1 hit. A full queue answers kOverloaded.
//
// Every request gets exactly one reply: its `<type>_reply`, or `error` with code/error/message
// (malformed msgpack, wrong version, bad fields, failures). Nothing a client sends stops the
// service.
//
// Security (curve.h): with keys (config.curve), the ROUTER is a CURVE server admitting the
// frontend and worker keys (ZAP domain "kvstore"); refused peers are counted in the stats
// metric tessera_kvstore_refused_peers_total.
//
// Lifetime: create() binds; run() serves until stop() (thread-safe, e.g. from a signal
// watcher) and returns after the workers have finished. The Store must outlive the Server.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/common/curve.h"
#include "tessera/common/result.h"
#include "tessera/kvstore/store.h"

namespace tessera::kvstore {

struct ServerConfig {
  std::string listen = "tcp://127.0.0.1:5557";  // "tcp://127.0.0.1:*" picks a free port
  int threads = 4;                                // worker threads for Redis and large blobs
  size_t max_queue = 1024;                        // pending tasks before kOverloaded
  size_t max_message_bytes = (size_t{256} << 20) + 4096;  // bigger bodies are refused unread
  curve::Settings curve;                          // --curve-dir / --insecure (docs/security.md)
};

class Server {
 public:
  static Result<std::unique_ptr<Server>> create(const ServerConfig& config, Store& store);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The endpoint actually bound (wildcard port resolved).
  const std::string& endpoint() const;
  Status run();
  void stop();
  // Every store and service metric as Prometheus text (what `stats` and GET /metrics serve);
  // thread-safe (atomics), rendered afresh at each call.
  std::string metrics_text() const;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::kvstore
