// L1 scenarios: LRU by count and by bytes, per-user quota and fair-share eviction, expiry.
#include "tessera/kvstore/l1_cache.h"

#include <gtest/gtest.h>

namespace tessera::kvstore {
namespace {

Blob blob_of(size_t n, char fill = 'x') { return std::make_shared<const std::string>(n, fill); }
BlobKey key(const std::string& user, const std::string& hash) { return {42, user, hash}; }

TEST(L1Cache, LruByEntryCount) {
  L1Cache c({.max_bytes = 1 << 20, .max_entries = 3, .per_user_max_bytes = 1 << 20});
  for (const char* h : {"a", "b", "c"}) ASSERT_TRUE(c.put(key("u", h), blob_of(10)).ok());
  ASSERT_NE(c.get(key("u", "a")), nullptr);  // a is now most recent; b is the LRU
  ASSERT_TRUE(c.put(key("u", "d"), blob_of(10)).ok());
  EXPECT_EQ(c.get(key("u", "b")), nullptr);
  EXPECT_NE(c.get(key("u", "a")), nullptr);
  EXPECT_NE(c.get(key("u", "c")), nullptr);
  EXPECT_NE(c.get(key("u", "d")), nullptr);
  const L1Stats s = c.stats();
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.bytes, 30u);
  EXPECT_EQ(s.evictions_entries, 1u);
}

TEST(L1Cache, LruByBytes) {
  L1Cache c({.max_bytes = 100, .max_entries = 100, .per_user_max_bytes = 100});
  ASSERT_TRUE(c.put(key("u", "a"), blob_of(40)).ok());
  ASSERT_TRUE(c.put(key("u", "b"), blob_of(40)).ok());
  ASSERT_TRUE(c.put(key("u", "c"), blob_of(40)).ok());  // 120 > 100: a goes (per-user quota)
  EXPECT_FALSE(c.contains(key("u", "a")));
  EXPECT_TRUE(c.contains(key("u", "b")));
  EXPECT_TRUE(c.contains(key("u", "c")));
  EXPECT_EQ(c.stats().bytes, 80u);
  // contains() does not refresh: b is still the LRU.
  ASSERT_TRUE(c.put(key("u", "d"), blob_of(30)).ok());
  EXPECT_FALSE(c.contains(key("u", "b")));
  EXPECT_EQ(c.stats().bytes, 70u);
}

TEST(L1Cache, ReplacingAnEntryUpdatesBytes) {
  L1Cache c({.max_bytes = 100, .max_entries = 10, .per_user_max_bytes = 100});
  ASSERT_TRUE(c.put(key("u", "a"), blob_of(40, '1')).ok());
  ASSERT_TRUE(c.put(key("u", "a"), blob_of(10, '2')).ok());
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_EQ(c.stats().bytes, 10u);
  EXPECT_EQ(*c.get(key("u", "a")), std::string(10, '2'));
}

TEST(L1Cache, OneUserCannotEvictEveryoneElse) {
  // Global room for 10 entries of 10 bytes; a user may hold 60 bytes.
  L1Cache c({.max_bytes = 100, .max_entries = 100, .per_user_max_bytes = 60});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(c.put(key("alice", "a" + std::to_string(i)), blob_of(10)).ok());
  // Mallory writes a lot: only her own entries churn once she reaches her quota...
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(c.put(key("mallory", "m" + std::to_string(i)), blob_of(10)).ok());
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(c.contains(key("alice", "a" + std::to_string(i)))) << i;
  EXPECT_EQ(c.stats().bytes, 100u);
  EXPECT_GT(c.stats().evictions_user_quota, 0u);
  // ...and the global byte bound evicts from the largest partition (hers), not from alice.
  ASSERT_TRUE(c.put(key("bob", "b0"), blob_of(10)).ok());
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(c.contains(key("alice", "a" + std::to_string(i)))) << i;
  EXPECT_TRUE(c.contains(key("bob", "b0")));
  EXPECT_TRUE(c.contains(key("mallory", "m49")));
  EXPECT_FALSE(c.contains(key("mallory", "m44")));  // her LRU entry went
  EXPECT_EQ(c.stats().evictions_bytes, 1u);
}

TEST(L1Cache, EntryBoundEvictsFromTheLargestPartition) {
  L1Cache c({.max_bytes = 1 << 20, .max_entries = 4, .per_user_max_bytes = 1 << 20});
  ASSERT_TRUE(c.put(key("a", "1"), blob_of(1)).ok());
  ASSERT_TRUE(c.put(key("b", "1"), blob_of(1)).ok());
  ASSERT_TRUE(c.put(key("b", "2"), blob_of(1)).ok());
  ASSERT_TRUE(c.put(key("b", "3"), blob_of(1)).ok());
  ASSERT_TRUE(c.put(key("c", "1"), blob_of(1)).ok());  // b (3 entries) loses b/1, a keeps its older entry
  EXPECT_TRUE(c.contains(key("a", "1")));
  EXPECT_FALSE(c.contains(key("b", "1")));
  EXPECT_TRUE(c.contains(key("c", "1")));
  EXPECT_EQ(c.stats().entries, 4u);
  // Ties (a:1, b:2, c:1 ... all size <= 2): the partition whose LRU entry is oldest loses.
  ASSERT_TRUE(c.put(key("d", "1"), blob_of(1)).ok());  // b still largest (2)
  EXPECT_FALSE(c.contains(key("b", "2")));
  ASSERT_TRUE(c.put(key("e", "1"), blob_of(1)).ok());  // all size 1: a's entry is the oldest
  EXPECT_FALSE(c.contains(key("a", "1")));
  EXPECT_EQ(c.stats().users, 4u);
}

TEST(L1Cache, TheEntryBeingPutIsNeverItsOwnVictim) {
  L1Cache c({.max_bytes = 100, .max_entries = 100, .per_user_max_bytes = 100});
  ASSERT_TRUE(c.put(key("a", "1"), blob_of(60)).ok());
  ASSERT_TRUE(c.put(key("b", "1"), blob_of(70)).ok());  // b is larger, but its only entry is new
  EXPECT_FALSE(c.contains(key("a", "1")));
  EXPECT_TRUE(c.contains(key("b", "1")));
}

TEST(L1Cache, OversizedBlobIsRefusedAndChangesNothing) {
  L1Cache c({.max_bytes = 100, .max_entries = 10, .per_user_max_bytes = 50});
  ASSERT_TRUE(c.put(key("a", "1"), blob_of(50)).ok());
  auto st = c.put(key("a", "2"), blob_of(51));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kTooLarge);
  EXPECT_TRUE(c.contains(key("a", "1")));
  EXPECT_EQ(c.stats().bytes, 50u);
}

TEST(L1Cache, UsersAreIsolatedAndInvalidatedAlone) {
  L1Cache c({});
  ASSERT_TRUE(c.put(key("alice", "same"), blob_of(5, 'A')).ok());
  ASSERT_TRUE(c.put(key("bob", "same"), blob_of(5, 'B')).ok());
  EXPECT_EQ(*c.get(key("alice", "same")), "AAAAA");
  EXPECT_EQ(*c.get(key("bob", "same")), "BBBBB");
  EXPECT_EQ(c.get(BlobKey{43, "alice", "same"}), nullptr);  // other model
  EXPECT_EQ(c.erase_user("alice"), 1u);
  EXPECT_EQ(c.get(key("alice", "same")), nullptr);
  EXPECT_NE(c.get(key("bob", "same")), nullptr);
  EXPECT_TRUE(c.erase(key("bob", "same")));
  EXPECT_FALSE(c.erase(key("bob", "same")));
  EXPECT_EQ(c.stats().entries, 0u);
  EXPECT_EQ(c.stats().users, 0u);
}

TEST(L1Cache, ExpiredEntriesAreMisses) {
  L1Cache c({});
  ASSERT_TRUE(c.put(key("u", "old"), blob_of(5), Clock::now() - std::chrono::seconds(1)).ok());
  ASSERT_TRUE(c.put(key("u", "new"), blob_of(5), Clock::now() + std::chrono::hours(1)).ok());
  EXPECT_EQ(c.get(key("u", "old")), nullptr);
  EXPECT_NE(c.get(key("u", "new")), nullptr);
  EXPECT_EQ(c.stats().expired, 1u);
  EXPECT_EQ(c.stats().entries, 1u);
}

TEST(L1Cache, BlobOutlivesEviction) {
  L1Cache c({.max_bytes = 10, .max_entries = 10, .per_user_max_bytes = 10});
  ASSERT_TRUE(c.put(key("u", "a"), blob_of(10, 'q')).ok());
  Blob held = c.get(key("u", "a"));
  ASSERT_TRUE(c.put(key("u", "b"), blob_of(10)).ok());
  EXPECT_FALSE(c.contains(key("u", "a")));
  EXPECT_EQ(*held, std::string(10, 'q'));
  EXPECT_EQ(c.clear(), 1u);
}

}  // namespace
}  // namespace tessera::kvstore
