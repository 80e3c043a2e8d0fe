// K/V events (docs/protocol.md, "K/V events"): a ZeroMQ PUB stream of the pages each worker's
// radix index stores and evicts, of cleared indexes (a worker gone or registered again) and of
// preference fills, for external routers; and a ROUTER side port that answers `kv_snapshot`
// with every worker's whole index and the sequence number it reflects (the replay rule: a
// subscriber subscribes first, takes a snapshot, then applies only messages with a higher
// `seq`; a gap in `seq` means it missed messages and takes a new snapshot).
//
// Events collected during one event-loop iteration go out as one message with the next `seq`
// (flush()); a snapshot first flushes, so its `seq` covers exactly the events sent before it.
//
// Ownership: owns its context, both sockets and one RadixObserver per worker name (handed to
// that worker's Batcher; they outlive every Batcher since the EventLoop destroys its
// WorkerRegistry before this). Threading: the event-loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "tessera/common/result.h"
#include "tessera/common/curve.h"
#include "tessera/common/step_plan.h"
#include "tessera/scheduler/radix_index.h"

namespace tessera::scheduler_app {

class WorkerRegistry;

struct KvEventsConfig {
  std::string endpoint;           // PUB bind ("" = no K/V events)
  std::string snapshot_endpoint;  // ROUTER bind for kv_snapshot (required with endpoint)
};

// The one place a K/V event socket is created and bound: with a secure key set it is a CURVE
// server (docs/security.md) admitting the keys of role `client` (client.key, client.d/*.key —
// an external router subscribes as a client), on ZAP `domain` ("kv-events", "kv-snapshot"; one
// per socket); `auth` is then the ZAP handler of `ctx`. kUnavailable when it cannot be bound.
Result<zmq::socket_t> bind_kv_event_socket(zmq::context_t& ctx, zmq::socket_type type, const std::string& endpoint,
                                           curve::Authenticator* auth, const curve::Keys& keys, const std::string& domain);

class KvEvents {
 public:
  // nullptr (no error) when config.endpoint is empty. kInvalidArgument without a snapshot
  // endpoint; kUnavailable when a socket cannot be bound.
  // `keys`: the scheduler's (curve.h); secure keys make both sockets CURVE servers.
  static Result<std::unique_ptr<KvEvents>> create(const KvEventsConfig& config, std::string scheduler_name,
                                                  const curve::Keys& keys);
  ~KvEvents();

  // The observer to hand to worker `name`'s Batcher (stable for the life of this object).
  scheduler::RadixObserver* observer_for(const std::string& worker);
  // Worker `name`'s index is gone (removed, or about to be replaced by a fresh one).
  void cleared(const std::string& worker);
  // A plan sent to `worker` fills preference K/V into these pages.
  void preference_fill(const std::string& worker, const KvFill& fill);
  // Publishes the events collected since the last flush as one message (nothing when none).
  void flush();

  zmq::socket_t& snapshot_socket() { return snapshot_; }
  // Answers every pending kv_snapshot request from `workers`' indexes.
  void serve_snapshots(const WorkerRegistry& workers);

  const std::string& endpoint() const { return bound_; }                    // as bound
  const std::string& snapshot_endpoint() const { return snapshot_bound_; }  // as bound
  uint64_t seq() const { return seq_; }  // of the last message published

  class Observer;  // kv_events.cpp

 private:
  explicit KvEvents(std::string name);
  void add_event(std::string encoded_map) { pending_.push_back(std::move(encoded_map)); }

  std::string name_;
  zmq::context_t ctx_{1};
  std::unique_ptr<curve::Authenticator> auth_;  // ctx_'s ZAP handler when secure; destroyed before ctx_
  zmq::socket_t pub_, snapshot_;  // bound by create(), in ctx_
  std::string bound_, snapshot_bound_;
  uint64_t seq_ = 0;
  std::vector<std::string> pending_;  // msgpack maps of the events not yet published
  std::map<std::string, std::unique_ptr<Observer>> observers_;
};

}  // namespace tessera::scheduler_app
