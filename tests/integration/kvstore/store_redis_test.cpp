// Store scenarios against a real redis-server (RedisServer fixture): L2 round trip and
// promotion, TTL expiry, isolation and MAC checks, Redis outage and reconnect, invalidation.
#include <gtest/gtest.h>

#include "../../unit/kvstore/synthetic_kv.h"
#include "tessera/kvstore/blob.h"
#include "tessera/kvstore/store.h"
#include "tessera/testing/redis_server.h"
#include "tessera/testing/wait.h"

namespace tessera::kvstore {
namespace {

using namespace std::chrono_literals;
using tessera::testing::wait_until;

constexpr uint64_t kFp = 0xfeedULL;
constexpr const char* kSecret = "test-secret";

std::string make_blob(uint32_t tokens, uint32_t seed, uint64_t fp = kFp) {
  return encode_blob(testing::synthetic_kv(DType::kBF16, {2, tokens, 2, 16}, fp, seed), {.codec = Codec::kZstd}).value();
}

class StoreRedis : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = tessera::testing::RedisServer::start();
    ASSERT_NE(redis_, nullptr) << "redis-server could not be started";
    store_ = make_store();
  }
  std::unique_ptr<Store> make_store(L1Config l1 = {}) {
    StoreConfig cfg;
    cfg.l1 = l1;
    cfg.redis = RedisConfig{.host = redis_->host(), .port = redis_->port(), .health_interval_ms = 100,
                            .max_backoff_ms = 200};
    cfg.secret = kSecret;
    auto s = Store::create(std::move(cfg));
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    return std::move(s).value();
  }
  std::unique_ptr<tessera::testing::RedisServer> redis_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreRedis, PutWritesBothTiersAndL2HitIsPromoted) {
  const BlobKey k{kFp, "alice", "pref-1"};
  const std::string blob = make_blob(5, 1);
  auto put = store_->put(k, blob);
  ASSERT_TRUE(put.ok()) << put.error().to_string();
  EXPECT_TRUE(put->l1);
  EXPECT_TRUE(put->l2);
  // Another node (fresh store, same Redis and secret) finds it in L2, then in its L1.
  auto other = make_store();
  auto first = other->get(k);
  ASSERT_TRUE(first.ok());
  ASSERT_NE(first->blob, nullptr);
  EXPECT_EQ(first->tier, Tier::kL2);
  EXPECT_EQ(*first->blob, blob);
  auto second = other->get(k);
  EXPECT_EQ(second->tier, Tier::kL1);
  EXPECT_NE(other->metrics_text().find("tessera_kvstore_hits_total{tier=\"l2\"} 1\n"), std::string::npos);
  // Nothing else in Redis holds the user name in clear.
  EXPECT_EQ(redis_->command({"KEYS", "*alice*"}), "");
}

TEST_F(StoreRedis, RejectsBadBlobsAndForeignFingerprints) {
  EXPECT_EQ(store_->put({kFp, "u", "h"}, "not a blob").error().code, ErrorCode::kTruncatedFile);
  EXPECT_EQ(store_->put({kFp + 1, "u", "h"}, make_blob(3, 1)).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->put({kFp, "", "h"}, make_blob(3, 1)).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(redis_->command({"DBSIZE"}), "0");
}

TEST_F(StoreRedis, TtlExpiresInRedis) {
  const BlobKey k{kFp, "alice", "short"};
  ASSERT_TRUE(store_->put(k, make_blob(3, 2), /*ttl_s=*/1).ok());
  auto l2 = store_->l2();
  ASSERT_TRUE(l2->exists(k).value());
  const std::string ttl = redis_->command({"TTL", l2->signer().redis_key(k)});
  EXPECT_TRUE(ttl == "1" || ttl == "0") << ttl;
  EXPECT_TRUE(wait_until([&] { return !l2->exists(k).value(); }, 5s)) << "key did not expire";
  // L1 carries the same expiry.
  EXPECT_TRUE(wait_until([&] { return store_->get(k)->blob == nullptr; }, 5s));
}

TEST_F(StoreRedis, UserBCannotReadUserA) {
  const BlobKey a{kFp, "alice", "pref"};
  const std::string blob = make_blob(4, 3);
  ASSERT_TRUE(store_->put(a, blob).ok());
  // Every key B can form names B's partition: same hash, same fingerprint, different user.
  for (const BlobKey& b : {BlobKey{kFp, "bob", "pref"}, BlobKey{kFp, "bob", "alice|pref"},
                           BlobKey{kFp, "alice|", "pref"}, BlobKey{kFp, "alic", "e|pref"}}) {
    auto r = store_->get(b);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->blob, nullptr) << b.user << " / " << b.hash;
  }
  // Even if B could write A's value under its own Redis key, the MAC binds it to A's key.
  auto l2 = store_->l2();
  const BlobKey b{kFp, "bob", "pref"};
  const std::string a_value = redis_->command({"GET", l2->signer().redis_key(a)});
  ASSERT_EQ(redis_->command({"SET", l2->signer().redis_key(b), a_value}), "OK");
  auto fresh = make_store();
  auto r = fresh->get(b);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->blob, nullptr);
  EXPECT_NE(fresh->metrics_text().find("tessera_kvstore_mac_failures_total 1\n"), std::string::npos);
}

TEST_F(StoreRedis, TamperedValueIsRejectedByItsMac) {
  const BlobKey k{kFp, "alice", "pref"};
  ASSERT_TRUE(store_->put(k, make_blob(4, 4)).ok());
  const std::string name = store_->l2()->signer().redis_key(k);
  std::string value = redis_->command({"GET", name});
  value[value.size() / 2] = static_cast<char>(value[value.size() / 2] ^ 0x01);
  ASSERT_EQ(redis_->command({"SET", name, value}), "OK");
  auto fresh = make_store();  // empty L1: must go to Redis
  auto r = fresh->get(k);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->blob, nullptr);
  EXPECT_EQ(fresh->l2()->counters().mac_failures, 1u);
  // A value sealed with another secret is rejected as well.
  auto foreign = RedisL2::create({.host = redis_->host(), .port = redis_->port()}, "other-secret").value();
  ASSERT_TRUE(foreign->put(k, make_blob(4, 4)).ok());  // same key fields, other secret -> other name
  EXPECT_EQ(redis_->command({"EXISTS", name}), "1");
  ASSERT_EQ(redis_->command({"SET", name, redis_->command({"GET", foreign->signer().redis_key(k)})}), "OK");
  EXPECT_EQ(fresh->l2()->get(k).error().code, ErrorCode::kPermissionDenied);
}

TEST_F(StoreRedis, RedisKilledMidTestServiceContinuesFromL1AndReconnects) {
  const BlobKey k1{kFp, "alice", "one"}, k2{kFp, "alice", "two"};
  const std::string b1 = make_blob(3, 5), b2 = make_blob(3, 6);
  ASSERT_TRUE(store_->put(k1, b1).ok());
  redis_->kill();
  EXPECT_TRUE(wait_until([&] { return !store_->l2_up(); }, 5s)) << "health check did not notice Redis died";
  EXPECT_NE(store_->metrics_text().find("tessera_kvstore_redis_up 0\n"), std::string::npos);
  auto hit = store_->get(k1);
  ASSERT_TRUE(hit.ok());
  ASSERT_NE(hit->blob, nullptr);
  EXPECT_EQ(hit->tier, Tier::kL1);
  auto put = store_->put(k2, b2);  // L1 only
  ASSERT_TRUE(put.ok()) << put.error().to_string();
  EXPECT_TRUE(put->l1);
  EXPECT_FALSE(put->l2);
  auto miss = store_->get({kFp, "alice", "three"});
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(miss->blob, nullptr);

  ASSERT_TRUE(redis_->restart());
  EXPECT_TRUE(wait_until([&] { return store_->l2_up(); }, 5s)) << "did not reconnect";
  EXPECT_EQ(store_->l2()->counters().reconnects, 1u);
  ASSERT_TRUE(store_->put(k2, b2)->l2);  // writes reach Redis again
  EXPECT_EQ(redis_->command({"EXISTS", store_->l2()->signer().redis_key(k2)}), "1");
}

TEST_F(StoreRedis, InvalidateUserClearsEveryTier) {
  for (const char* h : {"a", "b", "c"}) ASSERT_TRUE(store_->put({kFp, "alice", h}, make_blob(2, 7)).ok());
  ASSERT_TRUE(store_->put({kFp, "bob", "a"}, make_blob(2, 8)).ok());
  auto other = make_store();  // a second node that promoted alice's blob into its L1
  ASSERT_EQ(other->get({kFp, "alice", "a"})->tier, Tier::kL2);
  auto r = store_->invalidate_user("alice");
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->l1, 3u);
  EXPECT_EQ(r->l2, 3u);
  for (const char* h : {"a", "b", "c"}) {
    EXPECT_EQ(store_->get({kFp, "alice", h})->blob, nullptr) << h;
    EXPECT_EQ(store_->exists({kFp, "alice", h}).value(), Tier::kNone);
  }
  EXPECT_NE(store_->get({kFp, "bob", "a"})->blob, nullptr);
  EXPECT_EQ(redis_->command({"DBSIZE"}), "2");  // bob's value and bob's index
  // The other node dropped its promoted L1 copy on the invalidation event.
  EXPECT_TRUE(wait_until([&] { return other->l1_stats().entries == 0; }, 5s));
  EXPECT_EQ(other->get({kFp, "alice", "a"})->blob, nullptr);
  EXPECT_NE(other->metrics_text().find("tessera_kvstore_l1_remote_invalidations_total 1\n"), std::string::npos);
  // clear() empties both tiers, and the other node's L1 too.
  ASSERT_EQ(other->get({kFp, "bob", "a"})->tier, Tier::kL2);
  auto c = store_->clear();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->l2, 1u);
  EXPECT_EQ(redis_->command({"DBSIZE"}), "0");
  EXPECT_TRUE(wait_until([&] { return other->l1_stats().entries == 0; }, 5s));
}

TEST_F(StoreRedis, InvalidateWhileRedisDownSaysL2WasNotCleared) {
  ASSERT_TRUE(store_->put({kFp, "alice", "a"}, make_blob(2, 9)).ok());
  redis_->kill();
  ASSERT_TRUE(wait_until([&] { return !store_->l2_up(); }, 5s));
  auto r = store_->invalidate_user("alice");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("L1 cleared (1 entries)"), std::string::npos) << r.error().message;
  EXPECT_EQ(store_->l1_stats().entries, 0u);
}

TEST(StoreConfigCheck, EmptySecretIsRefusedWhenRedisIsOn) {
  StoreConfig cfg;
  cfg.redis = RedisConfig{};
  auto s = Store::create(cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("secret"), std::string::npos);
  StoreConfig l1_only;  // no Redis: no secret needed
  EXPECT_TRUE(Store::create(l1_only).ok());
}

}  // namespace
}  // namespace tessera::kvstore
