#include "kv_events.h"

#include <chrono>
#include <string_view>

#include <msgpack.hpp>

#include "tessera/common/log.h"
#include "tessera/common/msgpack_io.h"
#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "worker_registry.h"

namespace tessera::scheduler_app {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void key(Packer& p, std::string_view k) { p.pack_str(static_cast<uint32_t>(k.size())).pack_str_body(k.data(), static_cast<uint32_t>(k.size())); }
void str(Packer& p, std::string_view v) { key(p, v); }

template <class T>
void array(Packer& p, std::span<const T> xs) {
  p.pack_array(static_cast<uint32_t>(xs.size()));
  for (const T& x : xs) p.pack(x);
}

std::string bytes(const msgpack::sbuffer& b) { return std::string(b.data(), b.size()); }

// The three keys every message starts with (docs/protocol.md, "Common fields").
void header(Packer& p, std::string_view type, uint64_t id) {
  key(p, "v");
  p.pack(protocol::kProtocolVersion);
  key(p, "type");
  str(p, type);
  key(p, "id");
  p.pack(id);
}

// What msgpack-c may build from a kv_snapshot request (docs/protocol.md "K/V events"): a map
// of scalars (depth 2 lets one level of containers in; the 4 KiB cap bounds them).
const msgpack::unpack_limit kSnapshotRequestLimits(/*array=*/16, /*map=*/16, /*str=*/256, /*bin=*/256, /*ext=*/16,
                                                   /*depth=*/2);

std::string error_reply(uint64_t id, ErrorCode code, const std::string& message) {
  return protocol::encode_error(id, code, message);
}

}  // namespace

class KvEvents::Observer : public scheduler::RadixObserver {
 public:
  Observer(KvEvents& events, std::string worker) : events_(events), worker_(std::move(worker)) {}

  void on_stored(uint64_t ns_hash, std::span<const scheduler::RadixBlock> blocks, std::span<const int32_t> tokens) override {
    msgpack::sbuffer b;
    Packer p(b);
    p.pack_map(7);
    key(p, "kind");
    str(p, "stored");
    key(p, "worker");
    str(p, worker_);
    key(p, "ns");
    p.pack(ns_hash);
    key(p, "parent_hash");
    p.pack(blocks.empty() ? 0 : blocks.front().parent_hash);
    key(p, "block_hashes");
    p.pack_array(static_cast<uint32_t>(blocks.size()));
    for (const auto& bl : blocks) p.pack(bl.hash);
    key(p, "pages");
    p.pack_array(static_cast<uint32_t>(blocks.size()));
    for (const auto& bl : blocks) p.pack(bl.page);
    key(p, "token_ids");
    array(p, tokens);
    events_.add_event(bytes(b));
  }

  void on_removed(std::span<const scheduler::RadixBlock> blocks) override {
    msgpack::sbuffer b;
    Packer p(b);
    p.pack_map(4);
    key(p, "kind");
    str(p, "removed");
    key(p, "worker");
    str(p, worker_);
    key(p, "block_hashes");
    p.pack_array(static_cast<uint32_t>(blocks.size()));
    for (const auto& bl : blocks) p.pack(bl.hash);
    key(p, "pages");
    p.pack_array(static_cast<uint32_t>(blocks.size()));
    for (const auto& bl : blocks) p.pack(bl.page);
    events_.add_event(bytes(b));
  }

 private:
  KvEvents& events_;
  const std::string worker_;
};

Result<zmq::socket_t> bind_kv_event_socket(zmq::context_t& ctx, zmq::socket_type type, const std::string& endpoint,
                                           curve::Authenticator* auth, const curve::Keys& keys, const std::string& domain,
                                           metrics::Counter* refused) {
  try {
    zmq::socket_t s(ctx, type);
    s.set(zmq::sockopt::linger, 0);
    zmqu::limit_message_size(s);
    if (type == zmq::socket_type::router) {
      s.set(zmq::sockopt::sndhwm, KvEvents::kSnapshotSendHwm);
      s.set(zmq::sockopt::router_mandatory, 1);
      // Requests are tiny: libzmq drops a connection announcing a larger frame before buffering it.
      s.set(zmq::sockopt::maxmsgsize, KvEvents::kMaxSnapshotFrameBytes);
    } else {
      s.set(zmq::sockopt::sndhwm, KvEvents::kEventsSendHwm);  // PUB: a slow subscriber loses messages (a gap in seq)
    }
    TS_TRY(curve::serve(s, auth, keys, {.domain = domain, .admit = {curve::Role::kRouter}, .refused = refused}));
    s.bind(endpoint);
    return s;
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable, "cannot bind K/V event socket '" + endpoint + "': " + e.what());
  }
}

Result<std::unique_ptr<KvEvents>> KvEvents::create(const KvEventsConfig& config, std::string scheduler_name,
                                                    const curve::Keys& keys, metrics::Registry& registry) {
  if (config.endpoint.empty()) return std::unique_ptr<KvEvents>();
  if (config.snapshot_endpoint.empty())
    return make_error(ErrorCode::kInvalidArgument,
                      "--kv-events-endpoint needs --kv-events-snapshot-endpoint (where subscribers take the snapshot "
                      "they apply events to)");
  std::unique_ptr<KvEvents> ev(new KvEvents(std::move(scheduler_name), registry));
  if (keys.secure()) {
    TS_ASSIGN_OR_RETURN(ev->auth_, curve::Authenticator::start(ev->ctx_));
  }
  TS_ASSIGN_OR_RETURN(ev->pub_, bind_kv_event_socket(ev->ctx_, zmq::socket_type::pub, config.endpoint, ev->auth_.get(),
                                                     keys, "kv-events", &ev->refused_events_));
  TS_ASSIGN_OR_RETURN(ev->snapshot_, bind_kv_event_socket(ev->ctx_, zmq::socket_type::router, config.snapshot_endpoint,
                                                          ev->auth_.get(), keys, "kv-snapshot", &ev->refused_snapshot_));
  ev->bound_ = ev->pub_.get(zmq::sockopt::last_endpoint);
  ev->snapshot_bound_ = ev->snapshot_.get(zmq::sockopt::last_endpoint);
  return ev;
}

namespace {
constexpr const char* kRefusedHelp = "connections refused at the CURVE handshake (public key not in the socket's allow-list)";
constexpr const char* kSnapshotsHelp =
    "kv_snapshot replies: sent, or dropped because the peer had kSnapshotSendHwm (4) replies queued (not reading) or left";
}  // namespace

KvEvents::KvEvents(std::string name, metrics::Registry& registry)
    : name_(std::move(name)),
      refused_events_(registry.counter("tessera_scheduler_refused_peers_total", kRefusedHelp, {{"socket", "kv-events"}})),
      refused_snapshot_(registry.counter("tessera_scheduler_refused_peers_total", kRefusedHelp, {{"socket", "kv-snapshot"}})),
      snapshots_sent_(registry.counter("tessera_scheduler_kv_snapshots_total", kSnapshotsHelp, {{"result", "sent"}})),
      snapshots_dropped_(registry.counter("tessera_scheduler_kv_snapshots_total", kSnapshotsHelp, {{"result", "dropped"}})) {}
KvEvents::~KvEvents() = default;

scheduler::RadixObserver* KvEvents::observer_for(const std::string& worker) {
  auto& o = observers_[worker];
  if (!o) o = std::make_unique<Observer>(*this, worker);
  return o.get();
}

void KvEvents::cleared(const std::string& worker) {
  msgpack::sbuffer b;
  Packer p(b);
  p.pack_map(2);
  key(p, "kind");
  str(p, "cleared");
  key(p, "worker");
  str(p, worker);
  add_event(bytes(b));
}

void KvEvents::preference_fill(const std::string& worker, const KvFill& fill) {
  msgpack::sbuffer b;
  Packer p(b);
  p.pack_map(6);
  key(p, "kind");
  str(p, "preference_fill");
  key(p, "worker");
  str(p, worker);
  key(p, "request_id");
  p.pack(fill.request_id);
  key(p, "pages");
  array(p, std::span<const int32_t>(fill.pages));
  key(p, "num_tokens");
  p.pack(fill.num_tokens);
  key(p, "alpha");
  p.pack(static_cast<double>(fill.alpha));
  add_event(bytes(b));
}

void KvEvents::flush() {
  if (pending_.empty()) return;
  ++seq_;
  msgpack::sbuffer b;
  Packer p(b);
  p.pack_map(7);
  header(p, "kv_events", seq_);
  key(p, "seq");
  p.pack(seq_);
  key(p, "scheduler");
  str(p, name_);
  key(p, "unix_ms");
  p.pack(static_cast<int64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count()));
  key(p, "events");
  p.pack_array(static_cast<uint32_t>(pending_.size()));
  for (const std::string& e : pending_) b.write(e.data(), e.size());
  pending_.clear();
  // A PUB socket never blocks: a subscriber too slow to keep up loses messages and sees the gap
  // in `seq` (its rule: take a new snapshot).
  (void)zmqu::send(pub_, {"kv", bytes(b)}, /*dontwait=*/true);
}

void KvEvents::serve_snapshots(const WorkerRegistry& workers) {
  // The snapshot after its header (seq, scheduler, workers): built at most once per call, for
  // every request of this call — nothing changes the indexes in between.
  std::string body;
  for (int n = 0; n < kSnapshotRequestsPerPass; ++n) {
    auto frames = zmqu::recv(snapshot_, true);
    if (!frames.ok() || frames->empty()) return;
    auto env = zmqu::parse_router(std::move(*frames));
    if (!env.ok()) continue;  // no envelope to answer to
    // A request is ~30 bytes: anything much larger, or nested, is refused before it costs the
    // event loop more than reading it (no id: it is not looked for in what is refused).
    if (env->body.size() > kMaxSnapshotRequestBytes) {
      (void)zmqu::send(snapshot_, zmqu::router_reply(*env, error_reply(0, ErrorCode::kTooLarge,
                                                                       "a kv_snapshot request is at most " +
                                                                           std::to_string(kMaxSnapshotRequestBytes) +
                                                                           " bytes (got " + std::to_string(env->body.size()) + ")")),
                       true);
      continue;
    }
    auto oh = msgpack_io::unpack(env->body, kSnapshotRequestLimits);
    if (!oh.ok()) {
      (void)zmqu::send(snapshot_, zmqu::router_reply(*env, error_reply(0, ErrorCode::kMalformedMessage,
                                                                       "undecodable kv_snapshot request (a map of at most 16 "
                                                                       "fields, nested at most 2 deep): " + oh.error().message)),
                       true);
      continue;
    }
    uint64_t id = 0;  // as protocol::peek_id reads it, from the map already unpacked
    std::string type;
    if (oh->get().type == msgpack::type::MAP)
      for (const auto& kv : oh->get().via.map) {
        if (kv.key.type != msgpack::type::STR) continue;
        const std::string_view k(kv.key.via.str.ptr, kv.key.via.str.size);
        if (k == "type" && kv.val.type == msgpack::type::STR) type = kv.val.as<std::string>();
        if (k == "id" && kv.val.type == msgpack::type::POSITIVE_INTEGER) id = kv.val.via.u64;
      }
    if (type != "kv_snapshot") {
      (void)zmqu::send(snapshot_, zmqu::router_reply(*env, error_reply(id, ErrorCode::kInvalidArgument,
                                                                       "the K/V snapshot port only takes 'kv_snapshot' (got '" +
                                                                           type + "')")),
                       true);
      continue;
    }
    if (body.empty()) {
      flush();  // the snapshot covers every event published so far, and nothing later
      body = snapshot_body(workers);
    }
    msgpack::sbuffer b;
    Packer p(b);
    p.pack_map(6);
    header(p, "kv_snapshot", id);
    b.write(body.data(), body.size());
    // Never blocks: a peer with kSnapshotSendHwm replies still queued (not reading), or gone,
    // loses this one (ROUTER_MANDATORY makes that an error rather than a silent drop).
    if (zmqu::send(snapshot_, zmqu::router_reply(*env, bytes(b)), true).ok()) {
      snapshots_sent_.inc();
    } else {
      snapshots_dropped_.inc();
    }
  }
}

std::string KvEvents::snapshot_body(const WorkerRegistry& workers) const {
  msgpack::sbuffer b;
  Packer p(b);
  key(p, "seq");
  p.pack(seq_);
  key(p, "scheduler");
  str(p, name_);
  key(p, "workers");
  p.pack_array(static_cast<uint32_t>(workers.all().size()));
  for (const auto& [name, w] : workers.all()) {
    const scheduler::RadixIndex& index = w.batcher->index();
    p.pack_map(3);
    key(p, "name");
    str(p, name);
    key(p, "page_size");
    p.pack(index.page_size());
    key(p, "blocks");
    p.pack_array(static_cast<uint32_t>(index.indexed_pages()));
    index.for_each_block([&](uint64_t ns, const scheduler::RadixBlock& bl, std::span<const int32_t> tokens) {
      p.pack_map(5);
      key(p, "ns");
      p.pack(ns);
      key(p, "hash");
      p.pack(bl.hash);
      key(p, "parent_hash");
      p.pack(bl.parent_hash);
      key(p, "page");
      p.pack(bl.page);
      key(p, "token_ids");
      array(p, tokens);
    });
  }
  return bytes(b);
}

}  // namespace tessera::scheduler_app
