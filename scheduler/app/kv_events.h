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
// Both sockets carry every tenant's cached token ids, so with CURVE they admit only `router` keys
// (docs/security.md), never the `client` keys tenants' API clients hold. The snapshot port is
// served on the event-loop thread, so it is bounded: at most kSnapshotRequestsPerPass requests are
// read per iteration, the snapshot is built at most once per iteration (every request of one
// iteration gets the same one), and each peer may have at most kSnapshotSendHwm replies queued —
// a reply to a peer that is not reading (or gone) is dropped and counted, never queued.
//
// Ownership: owns its context, both sockets and one RadixObserver per worker name (handed to
// that worker's Batcher; they outlive every Batcher since the EventLoop destroys its
// WorkerRegistry before this). Threading: the event-loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "tessera/common/result.h"
#include "tessera/common/curve.h"
#include "tessera/common/metrics.h"
#include "tessera/common/step_plan.h"
#include "tessera/scheduler/radix_index.h"

namespace tessera::scheduler_app {

class WorkerRegistry;

struct KvEventsConfig {
  std::string endpoint;           // PUB bind ("" = no K/V events)
  std::string snapshot_endpoint;  // ROUTER bind for kv_snapshot (required with endpoint)
};

// The one place a K/V event socket is created and bound: with a secure key set it is a CURVE
// server (docs/security.md) admitting the keys of role `router` (router.key, router.d/*.key —
// an external router; not `client`: any tenant's API client holds one), on ZAP `domain`
// ("kv-events", "kv-snapshot"; one per socket); `auth` is then the ZAP handler of `ctx` and
// `refused` (may be null) counts refused handshakes. A ROUTER gets a send high-water mark of
// kSnapshotSendHwm and ROUTER_MANDATORY (a full peer makes a non-blocking send fail instead of
// dropping silently). kUnavailable when it cannot be bound.
Result<zmq::socket_t> bind_kv_event_socket(zmq::context_t& ctx, zmq::socket_type type, const std::string& endpoint,
                                           curve::Authenticator* auth, const curve::Keys& keys, const std::string& domain,
                                           metrics::Counter* refused = nullptr);

class KvEvents {
 public:
  // nullptr (no error) when config.endpoint is empty. kInvalidArgument without a snapshot
  // endpoint; kUnavailable when a socket cannot be bound.
  // `keys`: the scheduler's (curve.h); secure keys make both sockets CURVE servers.
  // `registry`: where the refusal and snapshot counters go (must outlive this object).
  static Result<std::unique_ptr<KvEvents>> create(const KvEventsConfig& config, std::string scheduler_name,
                                                  const curve::Keys& keys, metrics::Registry& registry);
  static constexpr int kSnapshotRequestsPerPass = 8;
  static constexpr int kSnapshotSendHwm = 4;  // replies queued per snapshot peer
  // A kv_snapshot request over kMaxSnapshotRequestBytes gets too_large (not unpacked); a frame
  // over kMaxSnapshotFrameBytes closes its connection (ZMQ_MAXMSGSIZE).
  static constexpr size_t kMaxSnapshotRequestBytes = 4096;
  static constexpr int64_t kMaxSnapshotFrameBytes = 64 * 1024;
  // Messages (one per loop iteration with events) queued per PUB subscriber; beyond it ZeroMQ
  // drops them for that subscriber, which sees a gap in `seq` and takes a snapshot again.
  static constexpr int kEventsSendHwm = 1000;
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
  // Answers up to kSnapshotRequestsPerPass pending requests from `workers`' indexes (the rest
  // wait for the next call: the socket stays readable).
  void serve_snapshots(const WorkerRegistry& workers);

  const std::string& endpoint() const { return bound_; }                    // as bound
  const std::string& snapshot_endpoint() const { return snapshot_bound_; }  // as bound
  uint64_t seq() const { return seq_; }  // of the last message published

  class Observer;  // kv_events.cpp

 private:
  KvEvents(std::string name, metrics::Registry& registry);
  void add_event(std::string encoded_map) { pending_.push_back(std::move(encoded_map)); }
  // A kv_snapshot reply's entries after its header (seq, scheduler, workers), msgpack.
  std::string snapshot_body(const WorkerRegistry& workers) const;

  std::string name_;
  zmq::context_t ctx_{1};
  std::unique_ptr<curve::Authenticator> auth_;  // ctx_'s ZAP handler when secure; destroyed before ctx_
  zmq::socket_t pub_, snapshot_;  // bound by create(), in ctx_
  std::string bound_, snapshot_bound_;
  metrics::Counter& refused_events_;    // tessera_scheduler_refused_peers_total{socket="kv-events"}
  metrics::Counter& refused_snapshot_;  // {socket="kv-snapshot"}
  metrics::Counter& snapshots_sent_;     // tessera_scheduler_kv_snapshots_total{result="sent"}
  metrics::Counter& snapshots_dropped_;  // {result="dropped"}: the peer's queue was full, or it left
  uint64_t seq_ = 0;
  std::vector<std::string> pending_;  // msgpack maps of the events not yet published
  std::map<std::string, std::unique_ptr<Observer>> observers_;
};

}  // namespace tessera::scheduler_app
