// `get_many` (docs/kvstore.md "Messages") against the real tessera-kvstore process: several
// hashes of one (fingerprint, user) in one round trip, answered in order with hits, misses and
// tiers as `get` answers them; users stay apart; bad requests are errors naming the field and the
// service keeps serving.
#include <gtest/gtest.h>

#include <msgpack.hpp>

#include <string>
#include <vector>

#include "../../unit/kvstore/synthetic_kv.h"
#include "tessera/common/msgpack_io.h"
#include "tessera/kvstore/blob.h"
#include "tessera/kvstore/client.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/kv_process.h"
#include "tessera/testing/redis_server.h"

namespace tessera::kvstore {
namespace {

using testing::KvProcess;

constexpr uint64_t kFp = 0x5eed0123ULL;

std::unique_ptr<Client> connect_to(const KvProcess& p) {
  return Client::connect({.endpoint = p.endpoint(), .timeout_ms = 10000,
                          .curve = tessera::testing::client_keys(curve::Role::kFrontend, curve::Role::kKvstore)})
      .value();
}

std::string blob(uint32_t tokens, uint32_t seed) {
  return encode_blob(testing::synthetic_kv(DType::kF16, {2, tokens, 2, 32}, kFp, seed), {.codec = Codec::kZstd}).value();
}

// A raw get_many body; `hashes` written as given (an array of strings) unless `not_array`.
std::string raw_get_many(uint64_t id, const std::vector<std::string>& hashes, bool not_array = false) {
  msgpack_io::Writer w;
  w.begin_map();
  w.key("v");
  w.i64(1);
  w.key("type");
  w.str("get_many");
  w.key("id");
  w.u64(id);
  w.key("user");
  w.str("alice");
  w.key("fingerprint");
  w.u64(kFp);
  w.key("hashes");
  if (not_array) {
    w.str("h0");
  } else {
    w.strs(hashes);
  }
  w.end_map();
  return w.take();
}

// `key` of a reply map as text ("" when absent or not a string).
std::string field(const std::string& reply, const std::string& key) {
  msgpack::object_handle oh = msgpack::unpack(reply.data(), reply.size());
  const msgpack::object& o = oh.get();
  if (o.type != msgpack::type::MAP) return "";
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const auto& kv = o.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR && kv.key.as<std::string>() == key && kv.val.type == msgpack::type::STR)
      return kv.val.as<std::string>();
  }
  return "";
}

TEST(KvServiceGetMany, AnswersEveryHashInOrderInOneRoundTrip) {
  auto kv = KvProcess::start({});
  ASSERT_NE(kv, nullptr);
  auto c = connect_to(*kv);
  std::vector<std::string> blobs;
  for (uint32_t i = 0; i < 40; ++i) {
    blobs.push_back(blob(16, i + 1));
    ASSERT_TRUE(c->put({kFp, "alice", "page" + std::to_string(i)}, blobs.back()).ok());
  }
  std::vector<std::string> hashes;
  for (int i = 0; i < 40; ++i) hashes.push_back("page" + std::to_string(i));
  hashes.insert(hashes.begin() + 3, "never-put");
  auto got = c->get_many(kFp, "alice", hashes);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  ASSERT_EQ(got->size(), hashes.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    SCOPED_TRACE(hashes[i]);
    if (i == 3) {
      EXPECT_FALSE((*got)[i].found);
      EXPECT_EQ((*got)[i].tier, Tier::kNone);
      EXPECT_TRUE((*got)[i].blob.empty());
      continue;
    }
    ASSERT_TRUE((*got)[i].found);
    EXPECT_EQ((*got)[i].tier, Tier::kL1);
    EXPECT_EQ((*got)[i].blob, blobs[i < 3 ? i : i - 1]);
  }
  // Another user's namespace holds none of them.
  auto bob = c->get_many(kFp, "bob", {"page0", "page1"});
  ASSERT_TRUE(bob.ok());
  EXPECT_FALSE((*bob)[0].found);
  EXPECT_FALSE((*bob)[1].found);
  // One request each, counted under its own type; the hits as get's.
  auto stats = c->stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_NE(stats->metrics.find("tessera_kvstore_requests_total{type=\"get_many\"} 2\n"), std::string::npos)
      << stats->metrics;
  EXPECT_NE(stats->metrics.find("tessera_kvstore_requests_total{type=\"get\"} 0\n"), std::string::npos);
  EXPECT_NE(stats->metrics.find("tessera_kvstore_hits_total{tier=\"l1\"} 40\n"), std::string::npos) << stats->metrics;
}

// Read events Redis counted since the last CONFIG RESETSTAT, less the INFO that asks (one per
// batch of commands read off a socket: a round trip's worth).
int redis_read_events(const tessera::testing::RedisServer& r) {
  const std::string info = r.command({"INFO", "stats"});
  const std::string key = "total_reads_processed:";
  const size_t at = info.find(key);
  return at == std::string::npos ? -1 : std::stoi(info.substr(at + key.size())) - 1;
}

// --redis-get-many-inflight-kb reaches the L2: with no L1, 24 pages asked at once are 24 GETs in
// a few read events with 256 and by default (auto: at least its 256 KiB floor; pipelined) and one
// read event per GET with 0 (a round trip each).
TEST(KvServiceGetMany, RedisInflightBudgetIsAnOption) {
  auto redis = tessera::testing::RedisServer::start();
  ASSERT_NE(redis, nullptr) << "redis-server could not be started";
  const std::vector<std::string> common = {"--redis", redis->address(), "--hmac-secret", "inflight-secret"};
  auto writer = KvProcess::start(common);
  ASSERT_NE(writer, nullptr);
  auto w = connect_to(*writer);
  std::vector<std::string> hashes;
  for (uint32_t i = 0; i < 24; ++i) {
    hashes.push_back("page" + std::to_string(i));
    ASSERT_TRUE(w->put({kFp, "alice", hashes.back()}, blob(16, i + 1)).ok());
  }
  for (const std::string kb : {"256", "auto", "0"}) {
    SCOPED_TRACE(kb);
    std::vector<std::string> args = common;
    for (const std::string& a : {std::string("--l1-max-entries"), std::string("0"), std::string("--redis-get-many-inflight-kb"), kb}) {
      args.push_back(a);
    }
    auto reader = KvProcess::start(args);
    ASSERT_NE(reader, nullptr);
    auto r = connect_to(*reader);
    redis->command({"CONFIG", "RESETSTAT"});
    auto got = r->get_many(kFp, "alice", hashes);
    const int reads = redis_read_events(*redis);
    ASSERT_TRUE(got.ok()) << got.error().to_string();
    for (const auto& g : *got) {
      EXPECT_TRUE(g.found);
      EXPECT_EQ(g.tier, Tier::kL2);
    }
    // Both processes' health checks (an INFO every 500 ms each) may add a few read events.
    if (kb == "0") {
      EXPECT_GE(reads, 24) << "one round trip per GET";
    } else {
      EXPECT_LE(reads, 2 + 24 / 4 + 4) << "24 GETs not pipelined";
    }
  }
}

// Blobs that would pass one message come in more than one reply: the kvstore answers a prefix
// (blob bytes within --max-blob-bytes + 4 KiB less 64 KiB of envelope, at least one hash) and the
// client asks again for the rest — the same blobs, in order, in the round trips the rule predicts.
TEST(KvServiceGetMany, RepliesStayWithinOneMessageAndTheClientAsksForTheRest) {
  const size_t max_blob = 200000;
  auto kv = KvProcess::start({"--max-blob-bytes", std::to_string(max_blob)});
  ASSERT_NE(kv, nullptr);
  auto c = connect_to(*kv);
  std::vector<std::string> blobs, hashes;
  for (uint32_t i = 0; i < 7; ++i) {
    blobs.push_back(encode_blob(testing::synthetic_kv(DType::kF16, {2, 96, 2, 32}, kFp, i + 1), {.codec = Codec::kNone}).value());
    hashes.push_back("big" + std::to_string(i));
    ASSERT_TRUE(c->put({kFp, "alice", hashes.back()}, blobs.back()).ok());
  }
  const size_t budget = max_blob + 4096 - (size_t{64} << 10);
  ASSERT_GT(2 * blobs[0].size(), budget / 2) << "blobs too small to need several replies";
  int expected_calls = 0;
  for (size_t i = 0; i < blobs.size();) {  // the server's rule: a prefix within the budget, at least one
    size_t bytes = blobs[i++].size();
    while (i < blobs.size() && bytes + blobs[i].size() <= budget) bytes += blobs[i++].size();
    ++expected_calls;
  }
  ASSERT_GT(expected_calls, 1);
  auto got = c->get_many(kFp, "alice", hashes);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  ASSERT_EQ(got->size(), blobs.size());
  for (size_t i = 0; i < blobs.size(); ++i) {
    ASSERT_TRUE((*got)[i].found) << i;
    EXPECT_EQ((*got)[i].blob, blobs[i]) << i;
  }
  auto stats = c->stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_NE(stats->metrics.find("tessera_kvstore_requests_total{type=\"get_many\"} " + std::to_string(expected_calls) + "\n"),
            std::string::npos)
      << stats->metrics;
}

TEST(KvServiceGetMany, BadRequestsNameTheFieldAndTheServiceStaysUp) {
  auto kv = KvProcess::start({});
  ASSERT_NE(kv, nullptr);
  auto c = connect_to(*kv);
  // Client side: the count is checked before sending.
  EXPECT_EQ(c->get_many(kFp, "alice", {}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(c->get_many(kFp, "alice", std::vector<std::string>(257, "h")).error().code, ErrorCode::kInvalidArgument);
  // Service side, raw: each an invalid_argument error naming `hashes`.
  struct Case {
    const char* name;
    std::string body;
    const char* mentions;
  };
  const std::vector<Case> cases = {
      {"no hashes", raw_get_many(21, {}), "hashes"},
      {"too many", raw_get_many(22, std::vector<std::string>(257, "h")), "hashes"},
      {"not an array", raw_get_many(23, {}, true), "hashes"},
      {"an empty hash", raw_get_many(24, {"h0", ""}), "hash"},
  };
  uint64_t id = 21;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    auto r = c->call_raw(k.body, id++);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_EQ(field(*r, "type"), "error");
    EXPECT_EQ(field(*r, "error"), "invalid_argument");
    EXPECT_NE(field(*r, "message").find(k.mentions), std::string::npos) << field(*r, "message");
  }
  ASSERT_TRUE(c->put({kFp, "alice", "h0"}, blob(4, 9)).ok());
  auto ok = c->get_many(kFp, "alice", {"h0"});
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_TRUE((*ok)[0].found);
  // What a client sees from a kvstore without get_many: recognized, so it can fall back to get.
  EXPECT_TRUE(Client::is_unknown_get_many(Error{ErrorCode::kInvalidArgument,
                                                "kvstore: unknown type 'get_many' (expected put, get, exists, delete, "
                                                "invalidate_user, clear or stats)"}));
  EXPECT_FALSE(Client::is_unknown_get_many(Error{ErrorCode::kInvalidArgument, "kvstore: hashes must be an array"}));
}

}  // namespace
}  // namespace tessera::kvstore
