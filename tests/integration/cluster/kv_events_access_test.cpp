// The K/V event sockets (docs/protocol.md "K/V events", docs/security.md) of a real scheduler:
// they carry every tenant's cached token ids, so they admit `router` keys only — a `client` key
// (which any tenant's ZeroMQ API client holds) is refused at the handshake on both, counted in
// tessera_scheduler_refused_peers_total{socket}, while a router key is served. And a router
// peer that floods the snapshot port with kv_snapshot requests and never reads its replies
// neither stops the scheduler (another request completes meanwhile) nor piles replies up: each
// request is answered or dropped (counted), and the dropped ones are most of them. Hostile
// requests (oversized, deeply nested, wrong types) get errors naming what is wrong, cheaply, and
// the next request is served.
#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "tessera/common/result.h"
#include "tessera/common/zmq_util.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/kv_snapshot.h"
#include "tessera/testing/wait.h"

namespace tessera::testing {
namespace {

using std::chrono::milliseconds;

ClusterOptions with_kv_events() {
  return ClusterOptions{.scheduler_args = {"--kv-events-endpoint", "tcp://127.0.0.1:*", "--kv-events-snapshot-endpoint",
                                           "tcp://127.0.0.1:*"}};
}

// A kv_snapshot round trip with a key of role `as`; the reply's `type` ("" when none came
// within `wait`).
std::string ask_snapshot(zmq::context_t& ctx, const std::string& endpoint, curve::Role as, milliseconds wait) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  secure_client(s, as, curve::Role::kScheduler);
  s.connect(endpoint);
  if (!zmqu::send(s, {kv_snapshot_request(1)}).ok()) return "";
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, wait) <= 0) return "";
  auto frames = zmqu::recv(s);
  if (!frames.ok() || frames->empty()) return "";
  msgpack::object_handle oh = msgpack::unpack(frames->back().data(), frames->back().size());
  for (const auto& kv : oh.get().via.map)
    if (kv.key.as<std::string>() == "type") return kv.val.as<std::string>();
  return "";
}

TEST(KvEventsAccess, ClientKeysAreRefusedOnBothSocketsRouterKeysServed) {
  Cluster c(with_kv_events());
  ASSERT_TRUE(c.ok());
  const std::string pub = line_field(c.scheduler_listening(), "kv_events");
  const std::string snap = line_field(c.scheduler_listening(), "kv_snapshot");
  ASSERT_FALSE(snap.empty()) << c.scheduler_listening();
  auto refused = [&](const char* socket) {
    return c.metric(c.metrics_port(), "tessera_scheduler_refused_peers_total", std::string("socket=\"") + socket + "\"");
  };
  EXPECT_EQ(refused("kv-events"), 0.0);
  EXPECT_EQ(refused("kv-snapshot"), 0.0);

  zmq::context_t ctx(1);
  // A tenant's API client key: refused at the handshake on both (libzmq does not retry it).
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "kv");
  secure_client(sub, curve::Role::kClient, curve::Role::kScheduler);
  sub.connect(pub);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  secure_client(dealer, curve::Role::kClient, curve::Role::kScheduler);
  dealer.connect(snap);
  ASSERT_TRUE(zmqu::send(dealer, {kv_snapshot_request(1)}).ok());
  EXPECT_TRUE(wait_until([&] { return refused("kv-events") >= 1 && refused("kv-snapshot") >= 1; }, milliseconds(10000)))
      << "kv-events refused " << refused("kv-events") << ", kv-snapshot refused " << refused("kv-snapshot");
  EXPECT_EQ(c.metric(c.metrics_port(), "tessera_scheduler_kv_snapshots_total"), 0.0) << "a client key got a snapshot";

  // A router key is served (and refused nowhere).
  const double before = refused("kv-snapshot");
  EXPECT_EQ(ask_snapshot(ctx, snap, curve::Role::kRouter, milliseconds(10000)), "kv_snapshot");
  EXPECT_EQ(c.metric(c.metrics_port(), "tessera_scheduler_kv_snapshots_total", "result=\"sent\""), 1.0);
  EXPECT_EQ(refused("kv-snapshot"), before);
  // The refused client's request was never delivered: its socket has nothing to read.
  zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
  EXPECT_EQ(zmq::poll(&item, 1, milliseconds(0)), 0);
}

TEST(KvEventsAccess, APeerThatNeverReadsSnapshotsDoesNotStallTheScheduler) {
  Cluster c(with_kv_events());
  ASSERT_TRUE(c.ok());
  const std::string snap = line_field(c.scheduler_listening(), "kv_snapshot");
  // Some cached pages, so each snapshot is a few KiB: the flood's replies far exceed what the
  // socket buffers between the two ends can hold.
  for (int i = 0; i < 4; ++i) {
    auto r = c.post("/v1/completions", nlohmann::json{{"prompt", "Once upon a time there was a little dragon number " +
                                                                     std::to_string(i) + " who liked to fly over the hills"},
                                                      {"max_tokens", 24},
                                                      {"temperature", 0}}
                                           .dump());
    ASSERT_TRUE(r.ok() && r->status == 200);
  }
  zmq::context_t ctx(1);
  zmq::socket_t flood(ctx, zmq::socket_type::dealer);
  flood.set(zmq::sockopt::linger, 0);
  flood.set(zmq::sockopt::rcvhwm, 1);
  flood.set(zmq::sockopt::rcvbuf, 4096);
  secure_client(flood, curve::Role::kRouter, curve::Role::kScheduler);
  flood.connect(snap);
  constexpr int kRequests = 20000;
  const std::string ask = kv_snapshot_request(9);
  for (int i = 0; i < kRequests; ++i) ASSERT_TRUE(zmqu::send(flood, {ask}).ok());  // never read

  // The scheduler keeps serving: a request completes while (or after) it works through the flood.
  auto r = c.post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0})");
  ASSERT_TRUE(r.ok() && r->status == 200) << c.logs();
  auto sent = [&] { return c.metric(c.metrics_port(), "tessera_scheduler_kv_snapshots_total", "result=\"sent\""); };
  auto dropped = [&] { return c.metric(c.metrics_port(), "tessera_scheduler_kv_snapshots_total", "result=\"dropped\""); };
  ASSERT_TRUE(wait_until([&] { return sent() + dropped() == kRequests; }, milliseconds(60000)))
      << "sent " << sent() << " dropped " << dropped() << " of " << kRequests;
  EXPECT_GT(dropped(), kRequests / 2) << "replies to a peer that does not read were queued, not dropped";
  RecordProperty("snapshots_sent", static_cast<int>(sent()));
  RecordProperty("snapshots_dropped", static_cast<int>(dropped()));
  // Another router peer still gets its snapshot, and the scheduler is healthy.
  EXPECT_EQ(ask_snapshot(ctx, snap, curve::Role::kRouter, milliseconds(10000)), "kv_snapshot");
  auto health = c.get("/health", c.metrics_port());
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200) << health->body;
}

// The reply to `body` on `s`: its "type" and, for an error, its "code" (-1 when none came).
std::pair<std::string, int> reply_to(zmq::socket_t& s, const std::string& body) {
  if (!zmqu::send(s, {body}).ok()) return {"", -1};
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, milliseconds(10000)) <= 0) return {"", -1};
  auto frames = zmqu::recv(s);
  if (!frames.ok() || frames->empty()) return {"", -1};
  msgpack::object_handle oh = msgpack::unpack(frames->back().data(), frames->back().size());
  std::pair<std::string, int> out{"", -1};
  for (const auto& kv : oh.get().via.map) {
    const std::string k = kv.key.as<std::string>();
    if (k == "type") out.first = kv.val.as<std::string>();
    if (k == "code") out.second = kv.val.as<int>();
  }
  return out;
}

TEST(KvEventsAccess, HostileSnapshotRequestsAreRefusedCheaplyAndTheNextIsServed) {
  Cluster c(with_kv_events());
  ASSERT_TRUE(c.ok());
  const std::string snap = line_field(c.scheduler_listening(), "kv_snapshot");
  zmq::context_t ctx(1);
  auto router_peer = [&] {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    secure_client(s, curve::Role::kRouter, curve::Role::kScheduler);
    s.connect(snap);
    return s;
  };
  // Four requests on one peer: never more replies than KvEvents::kSnapshotSendHwm, so none is
  // dropped whenever libzmq tells the scheduler's side that the peer read the earlier ones.
  zmq::socket_t s = router_peer();
  const int too_large = static_cast<int>(ErrorCode::kTooLarge), malformed = static_cast<int>(ErrorCode::kMalformedMessage),
            invalid = static_cast<int>(ErrorCode::kInvalidArgument);
  // 8 KiB of nested one-element arrays: refused by size, never decoded.
  EXPECT_EQ(reply_to(s, std::string(8191, '\x91') + '\xc0'), (std::pair<std::string, int>{"error", too_large}));
  // Small but nested 200 deep: over the request's depth of 2.
  EXPECT_EQ(reply_to(s, std::string(200, '\x91') + '\xc0'), (std::pair<std::string, int>{"error", malformed}));
  // A map whose "type" is not a string; then bytes that are not msgpack.
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> p(b);
  p.pack_map(2);
  p.pack("v");
  p.pack(1);
  p.pack("type");
  p.pack(7);
  EXPECT_EQ(reply_to(s, std::string(b.data(), b.size())), (std::pair<std::string, int>{"error", invalid}));
  EXPECT_EQ(reply_to(s, "not msgpack \xc1"), (std::pair<std::string, int>{"error", malformed}));
  // The scheduler still serves snapshots.
  zmq::socket_t next = router_peer();
  EXPECT_EQ(reply_to(next, kv_snapshot_request(3)).first, "kv_snapshot");
  EXPECT_EQ(c.metric(c.metrics_port(), "tessera_scheduler_kv_snapshots_total", "result=\"sent\""), 1.0);
}

}  // namespace
}  // namespace tessera::testing
