// A C++ client of tessera-kvstore over ZeroMQ (DEALER), for workers and tools.
//
//   auto c = Client::connect({.endpoint = "tcp://127.0.0.1:5557"}).value();
//   TS_TRY(c->put({fp, "alice", hash}, blob));
//   auto got = c->get({fp, "alice", hash});   // got->found, got->tier, got->blob
//
// Every call sends one request (kUnavailable when no connection takes it within `timeout_ms`:
// the kvstore is down or refused our CURVE key) and waits for its reply up to `timeout_ms`
// (kDeadlineExceeded after that; a late reply is recognized by its id and dropped). Service
// errors come back as their ErrorCode and message. ZeroMQ reconnects by itself when the
// service restarts.
//
// Thread-safety: calls are serialized by an internal mutex (one request in flight per Client);
// use one Client per thread for parallel requests.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/curve.h"
#include "tessera/common/result.h"
#include "tessera/kvstore/key.h"
#include "tessera/kvstore/types.h"

namespace tessera::kvstore {

struct ClientConfig {
  std::string endpoint = "tcp://127.0.0.1:5557";
  int timeout_ms = 5000;
  curve::ClientKeys curve;  // the kvstore's public key and ours (curve.h); empty = plain socket
  // Replies larger than this are refused unread (ZMQ_MAXMSGSIZE): the largest blob plus framing.
  int64_t max_message_bytes = (int64_t{256} << 20) + 4096;
};

struct ClientGet {
  bool found = false;
  Tier tier = Tier::kNone;
  std::string blob;  // the encoded blob (blob.h decode_blob) when found
};

struct ClientPut {
  bool l1 = false;
  bool l2 = false;
  std::string note;
};

struct ClientStats {
  std::string metrics;  // Prometheus text
  bool redis_configured = false;
  bool redis_up = false;
  uint64_t l1_entries = 0;
  uint64_t l1_bytes = 0;
};

class Client {
 public:
  static Result<std::unique_ptr<Client>> connect(const ClientConfig& config);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Result<ClientPut> put(const BlobKey& key, std::string_view blob, uint32_t ttl_s = 0);
  Result<ClientGet> get(const BlobKey& key);
  // The blobs of several hashes of one (fingerprint, user) in one round trip (`get_many`,
  // docs/kvstore.md): one ClientGet per hash, in order; 1..256 hashes (kInvalidArgument
  // otherwise). A kvstore older than get_many answers kInvalidArgument "unknown type 'get_many'"
  // (is_unknown_get_many()): use get() per hash with it.
  Result<std::vector<ClientGet>> get_many(uint64_t fingerprint, const std::string& user,
                                          const std::vector<std::string>& hashes);
  static bool is_unknown_get_many(const Error& e);
  Result<Tier> exists(const BlobKey& key);
  Result<bool> remove(const BlobKey& key);
  Result<InvalidateResult> invalidate_user(const std::string& user);
  Result<InvalidateResult> clear();
  Result<ClientStats> stats();

  // Sends raw bytes as a request body and returns the raw reply body (tests, tools).
  Result<std::string> call_raw(std::string_view body, uint64_t expect_id);

  struct Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};


}  // namespace tessera::kvstore
