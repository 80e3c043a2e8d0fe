// The L2 shard ring (shard_ring.h): the documented key -> shard rule, its balance, and how many
// keys move when a shard is added or removed (<= ~1/N), with numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "tessera/kvstore/blob.h"
#include "tessera/kvstore/key.h"
#include "tessera/kvstore/shard_ring.h"

namespace tessera::kvstore {
namespace {

constexpr int kKeys = 100000;

// Real Redis names (HMAC hex, key.h) of kKeys keys over 1000 users.
std::vector<std::string> names() {
  const KeySigner signer("s3cret");
  std::vector<std::string> out;
  out.reserve(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    out.push_back(signer.redis_key({0x1234, "user" + std::to_string(i % 1000), "h" + std::to_string(i)}));
  }
  return out;
}

std::vector<std::string> owners(const ShardRing& ring, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(ring.shards()[ring.owner(k)]);
  return out;
}

ShardRing ring_of(std::vector<std::string> shards) { return ShardRing::create(std::move(shards)).value(); }

TEST(ShardRing, RuleIsTheDocumentedOne) {
  // The owner is the shard of the first point at or after xxh64(key), points at
  // xxh64("host:port#i") for i < kPointsPerShard, wrapping around.
  const std::vector<std::string> shards = {"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6380"};
  const ShardRing ring = ring_of(shards);
  for (const std::string& key : {std::string("a"), std::string("tessera:pref_kv:00ff"), std::string("zz")}) {
    const uint64_t h = xxh64(key.data(), key.size());
    uint64_t best = 0, smallest = ~uint64_t{0};
    std::string best_shard, smallest_shard;
    bool found = false;
    for (const std::string& s : shards) {
      for (int i = 0; i < ShardRing::kPointsPerShard; ++i) {
        const std::string label = s + "#" + std::to_string(i);
        const uint64_t p = xxh64(label.data(), label.size());
        if (p >= h && (!found || p < best)) {
          found = true;
          best = p;
          best_shard = s;
        }
        if (p <= smallest) {
          smallest = p;
          smallest_shard = s;
        }
      }
    }
    EXPECT_EQ(shards[ring.owner(key)], found ? best_shard : smallest_shard) << key;
  }
}

TEST(ShardRing, ListOrderDoesNotMatterAndBadListsAreRefused) {
  const auto keys = names();
  EXPECT_EQ(owners(ring_of({"a:1", "b:2", "c:3"}), keys), owners(ring_of({"c:3", "a:1", "b:2"}), keys));
  EXPECT_EQ(ShardRing::create({}).error().message, "no redis shard given");
  EXPECT_EQ(ShardRing::create({"a:1", "b:2", "a:1"}).error().message, "redis shard 'a:1' is listed twice");
  EXPECT_EQ(ShardRing::create({"a:1", ""}).error().code, ErrorCode::kInvalidArgument);
  const ShardRing one = ring_of({"only:1"});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(one.owner(keys[static_cast<size_t>(i)]), 0u);
}

TEST(ShardRing, KeysAreSpreadEvenly) {
  const auto keys = names();
  for (size_t n : {2u, 3u, 4u, 8u}) {
    std::vector<std::string> shards;
    for (size_t i = 0; i < n; ++i) shards.push_back("10.0.0." + std::to_string(i + 1) + ":6379");
    std::map<std::string, int> count;
    for (const std::string& o : owners(ring_of(shards), keys)) ++count[o];
    ASSERT_EQ(count.size(), n);
    const double mean = static_cast<double>(kKeys) / static_cast<double>(n);
    double max_over_mean = 0;
    for (const auto& [s, c] : count) max_over_mean = std::max(max_over_mean, c / mean);
    std::printf("%zu shards: max/mean keys per shard %.3f\n", n, max_over_mean);
    for (const auto& [s, c] : count) {
      // 160 points per shard: each shard's share is within 20 % of the mean (measured: ~±10 %).
      EXPECT_NEAR(c / mean, 1.0, 0.20) << n << " shards, " << s << ": " << c;
    }
  }
}

TEST(ShardRing, AddingOrRemovingOneShardMovesAboutOneNthOfTheKeys) {
  const auto keys = names();
  const std::vector<std::string> three = {"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"};
  std::vector<std::string> four = three;
  four.push_back("10.0.0.4:6379");
  const auto before = owners(ring_of(three), keys), after = owners(ring_of(four), keys);
  int moved = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (before[i] != after[i]) {
      ++moved;
      EXPECT_EQ(after[i], "10.0.0.4:6379") << "a key moved between two old shards";
    }
  }
  const double fraction = static_cast<double>(moved) / kKeys;
  std::printf("3 -> 4 shards: %.4f of the keys moved (ideal 0.25)\n", fraction);
  EXPECT_GT(fraction, 0.20);
  EXPECT_LT(fraction, 0.30);  // <= 1/N + 0.05
  // Removing it again: exactly the keys it held move back, nothing else.
  const auto back = owners(ring_of(three), keys);
  EXPECT_EQ(back, before);
  // Removing one of three: only that shard's keys move (~1/3), spread over the other two.
  const auto two = owners(ring_of({"10.0.0.1:6379", "10.0.0.3:6379"}), keys);
  int moved2 = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (before[i] != two[i]) {
      ++moved2;
      EXPECT_EQ(before[i], "10.0.0.2:6379");
    }
  }
  const double fraction2 = static_cast<double>(moved2) / kKeys;
  std::printf("3 -> 2 shards: %.4f of the keys moved (ideal 0.333)\n", fraction2);
  EXPECT_LT(fraction2, 1.0 / 3 + 0.05);
}

}  // namespace
}  // namespace tessera::kvstore
