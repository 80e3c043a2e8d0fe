// The real tessera-kvstore process on loopback, driven as a worker would drive it: codecs end
// to end, malformed requests, two nodes sharing Redis, Redis outage, invalidation, big blobs.
#include <gtest/gtest.h>

#include <msgpack.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>
#include <zmq.hpp>

#include "../../unit/kvstore/synthetic_kv.h"
#include "tessera/common/child_process.h"
#include "tessera/kvstore/blob.h"
#include "tessera/kvstore/client.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/delay_proxy.h"
#include "tessera/testing/kv_process.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/redis_server.h"
#include "tessera/testing/wait.h"

namespace tessera::kvstore {
namespace {

using namespace std::chrono_literals;
using testing::KvProcess;
using tessera::testing::wait_until;

constexpr uint64_t kFp = 0xabcdef0123ULL;

std::unique_ptr<Client> client_for(const KvProcess& p, int timeout_ms = 10000) {
  return Client::connect({.endpoint = p.endpoint(), .timeout_ms = timeout_ms,
                          .curve = tessera::testing::client_keys(curve::Role::kFrontend, curve::Role::kKvstore)})
      .value();
}

std::string blob_of(uint32_t tokens, uint32_t seed, Codec codec = Codec::kZstd, DType dt = DType::kBF16) {
  return encode_blob(testing::synthetic_kv(dt, {3, tokens, 2, 32}, kFp, seed), {.codec = codec}).value();
}

TEST(KvService, EveryCodecRoundTripsThroughTheService) {
  auto kv = KvProcess::start({});
  ASSERT_NE(kv, nullptr);
  auto c = client_for(*kv);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const PackedKv src = testing::synthetic_kv(dt, {4, 37, 3, 64}, kFp, 3);
    for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kInt8, Codec::kInt4}) {
      const BlobKey key{kFp, "alice", std::string(codec_name(codec)) + dtype_name(dt)};
      const std::string blob = encode_blob(src, {.codec = codec, .group_size = 64}).value();
      auto put = c->put(key, blob);
      ASSERT_TRUE(put.ok()) << put.error().to_string();
      EXPECT_TRUE(put->l1);
      EXPECT_FALSE(put->l2);
      auto got = c->get(key);
      ASSERT_TRUE(got.ok()) << got.error().to_string();
      ASSERT_TRUE(got->found);
      EXPECT_EQ(got->tier, Tier::kL1);
      EXPECT_EQ(got->blob, blob);
      auto back = decode_blob(got->blob, {.expected_fingerprint = kFp});
      ASSERT_TRUE(back.ok());
      if (codec == Codec::kNone || codec == Codec::kZstd) {
        EXPECT_EQ(back->k, src.k);
        EXPECT_EQ(back->v, src.v);
      } else {
        const CodecReport r = measure_codec(src, {.codec = codec, .group_size = 64}).value();
        EXPECT_LE(r.relative_error, codec == Codec::kInt8 ? 0.01 : 0.15);
      }
    }
  }
  auto stats = c->stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->l1_entries, 12u);
  EXPECT_FALSE(stats->redis_configured);
  EXPECT_NE(stats->metrics.find("tessera_kvstore_hits_total{tier=\"l1\"} 12\n"), std::string::npos);
  EXPECT_NE(stats->metrics.find("tessera_kvstore_redis_up 0\n"), std::string::npos);
}

TEST(KvService, LruAndPerUserQuotaThroughFlags) {
  const std::string b = blob_of(8, 1);
  auto kv = KvProcess::start({"--l1-max-entries", "3", "--per-user-max-bytes", std::to_string(2 * b.size()),
                              "--l1-max-bytes", std::to_string(10 * b.size())});
  ASSERT_NE(kv, nullptr);
  auto c = client_for(*kv);
  for (const char* h : {"a", "b", "c"}) ASSERT_TRUE(c->put({kFp, "alice", h}, b).ok());
  // alice's quota is 2 blobs: "a" went.
  EXPECT_EQ(c->exists({kFp, "alice", "a"}).value(), Tier::kNone);
  ASSERT_TRUE(c->put({kFp, "bob", "a"}, b).ok());
  ASSERT_TRUE(c->put({kFp, "carol", "a"}, b).ok());  // 4 > 3 entries: alice (largest) loses "b"
  EXPECT_EQ(c->exists({kFp, "alice", "b"}).value(), Tier::kNone);
  EXPECT_EQ(c->exists({kFp, "alice", "c"}).value(), Tier::kL1);
  EXPECT_EQ(c->exists({kFp, "bob", "a"}).value(), Tier::kL1);
  EXPECT_EQ(c->exists({kFp, "carol", "a"}).value(), Tier::kL1);
  const std::string m = c->stats()->metrics;
  EXPECT_NE(m.find("tessera_kvstore_l1_evictions_total{reason=\"user_quota\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("tessera_kvstore_l1_evictions_total{reason=\"entries\"} 1\n"), std::string::npos) << m;
}

// ---- Malformed input: each gets an error reply naming the problem; the service stays up. ----

std::string pack_map(const std::map<std::string, msgpack::object>& fields, msgpack::zone& z) {
  (void)z;
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> p(buf);
  p.pack_map(static_cast<uint32_t>(fields.size()));
  for (const auto& [k, v] : fields) {
    p.pack(k);
    p.pack(v);
  }
  return std::string(buf.data(), buf.size());
}

struct RawReply {
  std::string type;
  int64_t code = 0;
  uint64_t id = 0;
  std::string message;
};

RawReply parse_reply(const std::string& body) {
  RawReply r;
  auto oh = msgpack::unpack(body.data(), body.size());
  const auto& o = oh.get();
  EXPECT_EQ(o.type, msgpack::type::MAP);
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const std::string k = o.via.map.ptr[i].key.as<std::string>();
    const auto& v = o.via.map.ptr[i].val;
    if (k == "type") r.type = v.as<std::string>();
    if (k == "code") r.code = v.as<int64_t>();
    if (k == "id") r.id = v.as<uint64_t>();
    if (k == "message") r.message = v.as<std::string>();
  }
  return r;
}

// Sends frames on a raw DEALER socket and returns the reply body (last frame).
std::string raw_call(zmq::socket_t& s, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    s.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, std::chrono::milliseconds(10000));
  EXPECT_TRUE(item.revents & ZMQ_POLLIN) << "no reply";
  if (!(item.revents & ZMQ_POLLIN)) return {};
  std::string last;
  zmq::message_t m;
  do {
    (void)s.recv(m);
    last = m.to_string();
  } while (m.more());
  return last;
}

TEST(KvService, MalformedRequestsGetErrorRepliesAndTheServiceStaysUp) {
  auto kv = KvProcess::start({});
  ASSERT_NE(kv, nullptr);
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  tessera::testing::secure_client(s, curve::Role::kFrontend, curve::Role::kKvstore);
  s.connect(kv->endpoint());

  msgpack::zone z;
  auto obj = [&](auto v) { return msgpack::object(v, z); };
  const std::string good_blob = blob_of(2, 1);
  struct Case {
    std::string name;
    std::vector<std::string> frames;
    ErrorCode code;
    std::string mentions;
    uint64_t id = 0;
  };
  std::vector<Case> cases = {
      {"garbage", {"\xc1\xff\x00garbage"}, ErrorCode::kMalformedMessage, "msgpack"},
      {"empty body", {""}, ErrorCode::kMalformedMessage, ""},
      {"array not map", {std::string("\x92\x01\x02", 3)}, ErrorCode::kMalformedMessage, "map"},
      {"truncated map", {std::string("\x83\xa1v\x01", 4)}, ErrorCode::kMalformedMessage, ""},
      {"no version", {pack_map({{"type", obj("stats")}, {"id", obj(5)}}, z)}, ErrorCode::kInvalidArgument, "v", 5},
      {"wrong version", {pack_map({{"v", obj(2)}, {"type", obj("stats")}, {"id", obj(6)}}, z)},
       ErrorCode::kProtocolMismatch, "version", 6},
      {"unknown type", {pack_map({{"v", obj(1)}, {"type", obj("explode")}, {"id", obj(7)}}, z)},
       ErrorCode::kInvalidArgument, "unknown type", 7},
      {"missing id", {pack_map({{"v", obj(1)}, {"type", obj("stats")}}, z)}, ErrorCode::kInvalidArgument, "id"},
      {"negative id", {pack_map({{"v", obj(1)}, {"type", obj("stats")}, {"id", obj(-3)}}, z)},
       ErrorCode::kOutOfRange, "id"},
      {"get without user",
       {pack_map({{"v", obj(1)}, {"type", obj("get")}, {"id", obj(8)}, {"fingerprint", obj(kFp)}, {"hash", obj("h")}}, z)},
       ErrorCode::kInvalidArgument, "user", 8},
      {"empty user",
       {pack_map({{"v", obj(1)}, {"type", obj("get")}, {"id", obj(9)}, {"user", obj("")}, {"fingerprint", obj(kFp)},
                  {"hash", obj("h")}}, z)},
       ErrorCode::kInvalidArgument, "user", 9},
      {"fingerprint as string",
       {pack_map({{"v", obj(1)}, {"type", obj("get")}, {"id", obj(10)}, {"user", obj("u")}, {"fingerprint", obj("x")},
                  {"hash", obj("h")}}, z)},
       ErrorCode::kInvalidArgument, "fingerprint", 10},
      {"put without blob",
       {pack_map({{"v", obj(1)}, {"type", obj("put")}, {"id", obj(11)}, {"user", obj("u")}, {"fingerprint", obj(kFp)},
                  {"hash", obj("h")}}, z)},
       ErrorCode::kInvalidArgument, "blob", 11},
      {"put corrupt blob",
       {pack_map({{"v", obj(1)}, {"type", obj("put")}, {"id", obj(12)}, {"user", obj("u")}, {"fingerprint", obj(kFp)},
                  {"hash", obj("h")}, {"blob", obj(std::string(100, 'x'))}}, z)},
       ErrorCode::kCorruptFile, "magic", 12},
      {"put blob of another model",
       {pack_map({{"v", obj(1)}, {"type", obj("put")}, {"id", obj(13)}, {"user", obj("u")},
                  {"fingerprint", obj(kFp + 1)}, {"hash", obj("h")}, {"blob", obj(good_blob)}}, z)},
       ErrorCode::kInvalidArgument, "fingerprint", 13},
      {"ttl out of range",
       {pack_map({{"v", obj(1)}, {"type", obj("put")}, {"id", obj(14)}, {"user", obj("u")}, {"fingerprint", obj(kFp)},
                  {"hash", obj("h")}, {"blob", obj(good_blob)}, {"ttl_s", obj(uint64_t{1} << 40)}}, z)},
       ErrorCode::kOutOfRange, "ttl_s", 14},
      {"too many frames", {"a", "b", "c"}, ErrorCode::kMalformedMessage, "frames"},
  };
  for (const Case& tc : cases) {
    const std::string body = raw_call(s, tc.frames);
    ASSERT_FALSE(body.empty()) << tc.name;
    const RawReply r = parse_reply(body);
    EXPECT_EQ(r.type, "error") << tc.name;
    EXPECT_EQ(r.code, static_cast<int64_t>(tc.code)) << tc.name << ": " << r.message;
    EXPECT_NE(r.message.find(tc.mentions), std::string::npos) << tc.name << ": " << r.message;
    EXPECT_EQ(r.id, tc.id) << tc.name;
    ASSERT_TRUE(kv->alive()) << "service died on: " << tc.name;
  }
  // Unknown fields are ignored; a REQ-style peer (empty delimiter) is answered too.
  zmq::socket_t req(ctx, zmq::socket_type::req);
  req.set(zmq::sockopt::linger, 0);
  tessera::testing::secure_client(req, curve::Role::kFrontend, curve::Role::kKvstore);
  req.connect(kv->endpoint());
  const std::string stats = pack_map({{"v", obj(1)}, {"type", obj("stats")}, {"id", obj(99)}, {"extra", obj(1.5)}}, z);
  const RawReply r = parse_reply(raw_call(req, {stats}));
  EXPECT_EQ(r.type, "stats_reply");
  EXPECT_EQ(r.id, 99u);
  auto c = client_for(*kv);
  const std::string m = c->stats()->metrics;
  EXPECT_NE(m.find("tessera_kvstore_bad_requests_total 15\n"), std::string::npos) << m;
  EXPECT_NE(m.find("tessera_kvstore_rejected_puts_total 2\n"), std::string::npos) << m;
}

// A Python client (pyzmq + msgpack, as docs/kvstore.md shows) speaks the same protocol.
TEST(KvService, ForeignPythonClient) {
  if (std::system("/usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 lacks python3-zmq or python3-msgpack (tests/run.sh installs them)";
  }
  auto kv = KvProcess::start({});
  ASSERT_NE(kv, nullptr);
  const std::string dir = tessera::testing::make_temp_dir("kvstore-py");
  const std::string blob_path = dir + "/blob.bin";
  {
    const std::string blob = blob_of(6, 11);
    FILE* f = std::fopen(blob_path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(blob.data(), 1, blob.size(), f), blob.size());
    std::fclose(f);
  }
  auto run = run_to_exit({.binary = "/usr/bin/python3",
                          .args = {tessera::testing::source_path("tests/integration/kvstore/py/foreign_client.py"),
                                   kv->endpoint(), blob_path, std::to_string(kFp), tessera::testing::curve_dir()},
                          .stdout_to = ChildOutput::pipe(), .stderr_to = ChildOutput::same_as_stdout()});
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  const std::string& out = run->second;
  EXPECT_EQ(run->first.raw(), 0) << out;
  EXPECT_EQ(out, "ok\n");
  // The blob the Python client stored is readable by the C++ client.
  auto got = client_for(*kv)->get({kFp, "py-user", "pref-1"});
  ASSERT_TRUE(got.ok() && got->found);
  EXPECT_TRUE(decode_blob(got->blob, {.expected_fingerprint = kFp}).ok());
}

// ---- With Redis ----

class KvServiceRedis : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = tessera::testing::RedisServer::start();
    ASSERT_NE(redis_, nullptr);
  }
  std::unique_ptr<KvProcess> start_node() {
    return KvProcess::start({"--redis", redis_->address(), "--hmac-secret", "s3cret"});
  }
  std::unique_ptr<tessera::testing::RedisServer> redis_;
};

TEST_F(KvServiceRedis, SecondNodeServesFromRedisAndUsersAreIsolated) {
  auto n1 = start_node(), n2 = start_node();
  ASSERT_NE(n1, nullptr);
  ASSERT_NE(n2, nullptr);
  auto c1 = client_for(*n1), c2 = client_for(*n2);
  const BlobKey a{kFp, "alice", "pref"};
  const std::string blob = blob_of(20, 2);
  auto put = c1->put(a, blob);
  ASSERT_TRUE(put.ok()) << put.error().to_string();
  EXPECT_TRUE(put->l1);
  EXPECT_TRUE(put->l2);
  auto first = c2->get(a);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->found);
  EXPECT_EQ(first->tier, Tier::kL2);
  EXPECT_EQ(first->blob, blob);
  EXPECT_EQ(c2->get(a)->tier, Tier::kL1);  // promoted
  for (const BlobKey& b : {BlobKey{kFp, "bob", "pref"}, BlobKey{kFp, "bob", "alice"},
                           BlobKey{kFp, "alice|pref", "pref"}, BlobKey{kFp + 1, "alice", "pref"}}) {
    EXPECT_FALSE(c2->get(b)->found) << b.user << "/" << b.hash;
    EXPECT_FALSE(c1->get(b)->found) << b.user << "/" << b.hash;
  }
}

// With L1 off every get is served from Redis; the reply must carry the blob intact (regression:
// the reply once pointed into a blob freed before encoding when L1 did not keep it).
TEST_F(KvServiceRedis, L1OffServesFromRedis) {
  auto n = KvProcess::start({"--redis", redis_->address(), "--hmac-secret", "s3cret", "--l1-max-entries", "0"});
  ASSERT_NE(n, nullptr);
  auto c = client_for(*n);
  const std::string blob = blob_of(400, 12, Codec::kNone);  // ~300 KB: freed memory would be unmapped
  ASSERT_GT(blob.size(), 256u * 1024);
  auto put = c->put({kFp, "alice", "big"}, blob);
  ASSERT_TRUE(put.ok()) << put.error().to_string();
  EXPECT_FALSE(put->l1);
  EXPECT_TRUE(put->l2);
  for (int i = 0; i < 3; ++i) {
    auto got = c->get({kFp, "alice", "big"});
    ASSERT_TRUE(got.ok()) << got.error().to_string();
    ASSERT_TRUE(got->found);
    EXPECT_EQ(got->tier, Tier::kL2);
    EXPECT_EQ(got->blob, blob);
  }
  EXPECT_TRUE(n->alive());
}

TEST_F(KvServiceRedis, RedisKilledMidTestServiceContinuesFromL1ThenReconnects) {
  auto n = start_node();
  ASSERT_NE(n, nullptr);
  auto c = client_for(*n);
  const BlobKey k1{kFp, "alice", "one"}, k2{kFp, "alice", "two"};
  ASSERT_TRUE(c->put(k1, blob_of(4, 3))->l2);
  redis_->kill();
  ASSERT_TRUE(wait_until([&] { return !c->stats()->redis_up; }, 10s)) << "redis_up never went to 0";
  EXPECT_NE(c->stats()->metrics.find("tessera_kvstore_redis_up 0\n"), std::string::npos);
  auto hit = c->get(k1);
  ASSERT_TRUE(hit.ok()) << hit.error().to_string();
  EXPECT_TRUE(hit->found);
  EXPECT_EQ(hit->tier, Tier::kL1);
  auto put = c->put(k2, blob_of(4, 4));
  ASSERT_TRUE(put.ok()) << put.error().to_string();
  EXPECT_TRUE(put->l1);
  EXPECT_FALSE(put->l2);
  EXPECT_FALSE(c->get({kFp, "alice", "three"})->found);  // a miss is a miss, not an error
  ASSERT_TRUE(redis_->restart());
  ASSERT_TRUE(wait_until([&] { return c->stats()->redis_up; }, 10s)) << "did not reconnect";
  EXPECT_NE(c->stats()->metrics.find("tessera_kvstore_redis_reconnects_total 1\n"), std::string::npos);
  EXPECT_TRUE(c->put(k2, blob_of(4, 4))->l2);
  // Both values (k1 written back from L1 when Redis came back empty; k2) and alice's index.
  EXPECT_TRUE(wait_until([&] { return redis_->command({"DBSIZE"}) == "3"; }, 10s)) << redis_->command({"DBSIZE"});
  EXPECT_TRUE(n->alive());
}

// Redis restarted without persistence comes back empty; the node writes its L1 entries back
// (issue 18, finding 10), so a second node with an empty L1 finds the preference in Redis.
TEST_F(KvServiceRedis, L1EntriesAreWrittenBackWhenRedisComesBackEmpty) {
  auto n1 = start_node();
  ASSERT_NE(n1, nullptr);
  auto c1 = client_for(*n1);
  const BlobKey k{kFp, "alice", "pref"};
  const std::string blob = blob_of(6, 5);
  ASSERT_TRUE(c1->put(k, blob)->l2);
  redis_->kill();
  ASSERT_TRUE(redis_->restart());
  ASSERT_EQ(redis_->command({"DBSIZE"}), "0");  // no persistence: the data is gone
  // Noticed by the health check (down, or a new run_id), then written back.
  ASSERT_TRUE(wait_until([&] { return redis_->command({"DBSIZE"}) == "2"; }, 10s))  // the value and alice's index
      << "never written back; DBSIZE " << redis_->command({"DBSIZE"});
  EXPECT_NE(c1->stats()->metrics.find("tessera_kvstore_l2_write_backs_total 1\n"), std::string::npos)
      << c1->stats()->metrics;
  auto n2 = start_node();
  ASSERT_NE(n2, nullptr);
  auto got = client_for(*n2)->get(k);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  ASSERT_TRUE(got->found);
  EXPECT_EQ(got->tier, Tier::kL2);
  EXPECT_EQ(got->blob, blob);
}

TEST_F(KvServiceRedis, InvalidateUserClearsEveryTier) {
  auto n1 = start_node(), n2 = start_node();
  ASSERT_NE(n1, nullptr);
  ASSERT_NE(n2, nullptr);
  auto c1 = client_for(*n1), c2 = client_for(*n2);
  for (const char* h : {"x", "y"}) ASSERT_TRUE(c1->put({kFp, "alice", h}, blob_of(3, 5))->l2);
  ASSERT_TRUE(c1->put({kFp, "bob", "x"}, blob_of(3, 6))->l2);
  ASSERT_EQ(c2->get({kFp, "alice", "x"})->tier, Tier::kL2);  // node 2 now holds a copy in its L1
  ASSERT_EQ(c2->exists({kFp, "alice", "x"}).value(), Tier::kL1);
  auto r = c1->invalidate_user("alice");
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->l1, 2u);
  EXPECT_EQ(r->l2, 2u);
  // Node 2 drops its L1 copy on the invalidation event published through Redis.
  EXPECT_TRUE(wait_until([&] { return c2->exists({kFp, "alice", "x"}).value() == Tier::kNone; }, 5s));
  for (const char* h : {"x", "y"}) {
    EXPECT_FALSE(c1->get({kFp, "alice", h})->found);
    EXPECT_FALSE(c2->get({kFp, "alice", h})->found);
  }
  EXPECT_TRUE(c2->get({kFp, "bob", "x"})->found);
  EXPECT_EQ(redis_->command({"DBSIZE"}), "2");  // bob's value and index
  auto cleared = c1->clear();
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(redis_->command({"DBSIZE"}), "0");
}

TEST_F(KvServiceRedis, EmptySecretIsRefusedWhenRedisIsOn) {
  auto [code, out] = KvProcess::run_to_exit({"--redis", redis_->address(), "--listen", "tcp://127.0.0.1:*"});
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("secret"), std::string::npos) << out;
  auto [code2, out2] = KvProcess::run_to_exit({"--threads", "0"});
  EXPECT_EQ(code2, 2) << out2;
  EXPECT_NE(out2.find("threads"), std::string::npos) << out2;
}

// A multi-megabyte put (to L1 and Redis) does not hold up another client's L1 hits: the put's
// traffic to Redis goes through a DelayProxy whose gate holds it mid-way, so the put is provably
// still in flight (its SET sent, held, unanswered) while another client's L1 gets are answered;
// then the gate opens and the put completes, stored in both tiers.
TEST_F(KvServiceRedis, BigPutDoesNotBlockOtherClients) {
  auto proxy = tessera::testing::DelayProxy::start(redis_->host(), redis_->port(), std::chrono::microseconds(0));
  ASSERT_NE(proxy, nullptr);
  auto n = KvProcess::start({"--redis", proxy->address(), "--hmac-secret", "s3cret"});
  ASSERT_NE(n, nullptr);
  auto small = client_for(*n), big = client_for(*n, 60000);
  const BlobKey hot{kFp, "bob", "hot"};
  ASSERT_TRUE(small->put(hot, blob_of(4, 7))->l2);
  PackedKv kv;  // 2 x 24 MiB of f32 zeros, stored uncompressed
  kv.fingerprint = kFp;
  kv.dtype = DType::kF32;
  kv.shape = {12, 1024, 8, 64};
  kv.k.assign(kv.region_bytes(), 0);
  kv.v.assign(kv.region_bytes(), 0);
  const std::string huge = encode_blob(kv, {.codec = Codec::kNone}).value();
  // Each Redis connection passes 1 MiB more, then is held: the health checks' PINGs and short
  // commands go through, the huge SET stops after its first MiB.
  constexpr size_t kPass = size_t{1} << 20;
  proxy->hold_upstream_after(kPass);
  std::atomic<bool> put_done{false};
  std::optional<Result<ClientPut>> put;
  std::thread writer([&] {
    put.emplace(big->put({kFp, "alice", "huge"}, huge));
    put_done = true;
  });
  // The node has written the whole SET to Redis's socket (the rest of it is held): the put waits
  // for a reply that cannot come before release().
  const bool held = wait_until([&] { return proxy->held_bytes() >= huge.size() - kPass; }, 60s);
  EXPECT_TRUE(held) << "the big put never reached Redis (held " << proxy->held_bytes() << " bytes)";
  if (held) {
    for (int i = 0; i < 20; ++i) {
      auto g = small->get(hot);
      ASSERT_TRUE(g.ok()) << "an L1 hit waited for the big put: " << g.error().to_string();
      EXPECT_TRUE(g->found);
      EXPECT_EQ(g->tier, Tier::kL1);
    }
    EXPECT_FALSE(put_done.load()) << "the put finished while its SET was held";
  }
  proxy->release();
  writer.join();
  ASSERT_TRUE(put.has_value() && put->ok()) << (put.has_value() ? put->error().to_string() : "no put");
  EXPECT_TRUE((*put)->l1);
  EXPECT_TRUE((*put)->l2) << "the SET was held past the node's Redis I/O timeout (3 s): " << (*put)->note;
  auto got = big->get({kFp, "alice", "huge"});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->blob.size(), huge.size());
}

}  // namespace
}  // namespace tessera::kvstore
