// Two workers sharing preference K/V through real tessera-kvstore processes and a real
// redis-server (integration): worker A (its own Engine) computes user U's preference and stores
// it through kvstore node 1; worker B (a second Engine, same model) talks to kvstore node 2,
// which finds the blob in Redis: B injects it without computing (provenance "redis", then
// "kvstore" once promoted to node 2's memory), and its greedy output equals A's token for token.
// Another user with the same preference text never gets U's blob.
#include "fixture.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/kv_process.h"
#include "tessera/testing/redis_server.h"

namespace tessera::worker::testing {
namespace {

using kvstore::testing::KvProcess;
using PrefKvstoreE2E = PreferenceFixture;

TEST_F(PrefKvstoreE2E, SecondWorkerServedFromRedisWithoutComputing) {
  auto redis = tessera::testing::RedisServer::start();
  ASSERT_NE(redis, nullptr);
  auto node1 = KvProcess::start({"--redis", redis->address(), "--hmac-secret", "dki-test"});
  auto node2 = KvProcess::start({"--redis", redis->address(), "--hmac-secret", "dki-test"});
  ASSERT_NE(node1, nullptr);
  ASSERT_NE(node2, nullptr);
  const auto keys = tessera::testing::client_keys(curve::Role::kWorker, curve::Role::kKvstore);
  auto store1 = connect_kvstore({.endpoint = node1->endpoint(), .timeout_ms = 5000, .curve = keys});
  auto store2 = connect_kvstore({.endpoint = node2->endpoint(), .timeout_ms = 5000, .curve = keys});
  ASSERT_TRUE(store1.ok()) << store1.error().to_string();
  ASSERT_TRUE(store2.ok()) << store2.error().to_string();
  const InjectorConfig cfg{.codec = {.codec = kvstore::Codec::kZstd}};
  constexpr int32_t kGen = 24;

  auto ea = make_engine(*model_);
  PreferenceInjector a(store1->get(), cfg);
  a.attach(*ea);
  auto ra = generate_with_preference(*ea, {.fill = fill_for("user-u", 0.6f), .base = greedy(prompt_, kGen)});
  ASSERT_TRUE(ra.ok()) << ra.error().to_string();
  EXPECT_EQ(ra->fill->source, "compute");
  ASSERT_TRUE(a.flush(10000));
  EXPECT_EQ(a.stats().puts_done, 1u);
  EXPECT_EQ(ra->gen.tokens, reference(0.6f, kGen).tokens);

  auto eb = make_engine(*model_);
  PreferenceInjector b(store2->get(), cfg);
  b.attach(*eb);
  for (const char* want : {"redis", "kvstore"}) {
    auto rb = generate_with_preference(*eb, {.fill = fill_for("user-u", 0.6f, /*with_tokens=*/false), .base = greedy(prompt_, kGen)});
    ASSERT_TRUE(rb.ok()) << rb.error().to_string();
    EXPECT_EQ(rb->fill->source, want);
    EXPECT_GT(rb->fill->kv_bytes, 0);
    EXPECT_GT(rb->fill->transfer_ms, 0.0);
    EXPECT_EQ(rb->gen.tokens, ra->gen.tokens);
  }
  EXPECT_EQ(b.stats().computed, 0u);
  EXPECT_EQ(b.stats().hits_l2, 1u);
  EXPECT_EQ(b.stats().hits_l1, 1u);

  // Another user, same preference: a miss in every tier (computed, never U's blob).
  auto rv = generate_with_preference(*eb, {.fill = fill_for("user-v", 0.6f), .base = greedy(prompt_, kGen)});
  ASSERT_TRUE(rv.ok()) << rv.error().to_string();
  EXPECT_EQ(rv->fill->source, "compute");
  auto rv2 = generate_with_preference(*eb, {.fill = fill_for("user-w", 0.6f, false), .base = greedy(prompt_, kGen)});
  ASSERT_FALSE(rv2.ok());
  EXPECT_EQ(rv2.error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace tessera::worker::testing
