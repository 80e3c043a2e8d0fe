// common/hash.h and common/hash_ring.h: reference vectors, key movement on membership changes,
// balance, and the bounded-load guarantee.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tessera/testing/scenario.h"
#include "tessera/common/hash.h"
#include "tessera/common/hash_ring.h"

namespace tessera {
namespace {

TEST(Hash, ReferenceVectors) {
  // FNV-1a 64 (published test vectors) and SplitMix64's first output for seed 0.
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(mix64(0x9e3779b97f4a7c15ULL), 0xe220a8397b1dcdafULL);
  // hash_tokens, pinned (computed by an independent Python implementation of the definition in
  // hash.h). Frontends and schedulers must agree on these: changing them reshuffles routing.
  EXPECT_EQ(hash_tokens({}), 0xf52a15e9a9b5e89bULL);
  const std::vector<int32_t> t123{1, 2, 3};
  EXPECT_EQ(hash_tokens(t123), 0x3c9c954275794151ULL);
  EXPECT_EQ(hash_tokens(t123, 42), 0x88301ca689b37a72ULL);
  const std::vector<int32_t> neg{-1, 7};
  EXPECT_EQ(hash_tokens(neg), 0x692986ab779e0478ULL);
}

TEST(Hash, TokenHashesAreOrderAndLengthSensitive) {
  const std::vector<int32_t> a{1, 2, 3}, b{3, 2, 1}, c{1, 2, 3, 0}, d{1, 2};
  EXPECT_NE(hash_tokens(a), hash_tokens(b));
  EXPECT_NE(hash_tokens(a), hash_tokens(c));
  EXPECT_NE(hash_tokens(a), hash_tokens(d));
  EXPECT_NE(hash_tokens(a, 1), hash_tokens(a, 2));
  // Routing keys depend only on the first k tokens.
  const std::vector<int32_t> p1{5, 6, 7, 8, 100}, p2{5, 6, 7, 8, 200};
  EXPECT_EQ(prefix_routing_key(p1, 4), prefix_routing_key(p2, 4));
  EXPECT_NE(prefix_routing_key(p1, 5), prefix_routing_key(p2, 5));
  EXPECT_EQ(prefix_routing_key(d, 64), hash_tokens(d));
}

std::map<std::string, int> owners(const HashRing& ring, int keys, std::vector<std::string>* out) {
  std::map<std::string, int> count;
  out->clear();
  for (int i = 0; i < keys; ++i) {
    auto o = ring.owner(mix64(static_cast<uint64_t>(i)));
    out->emplace_back(*o);
    ++count[out->back()];
  }
  return count;
}

HashRing ring_of(int n) {
  HashRing ring;
  for (int i = 0; i < n; ++i) EXPECT_OK(ring.add("worker-" + std::to_string(i)));
  return ring;
}

TEST(HashRing, MembershipErrors) {
  HashRing ring;
  EXPECT_EQ(ring.owner(1).error().code, ErrorCode::kUnavailable);
  EXPECT_TRUE(ring.preference_list(1).empty());
  EXPECT_OK(ring.add("a"));
  EXPECT_EQ(ring.add("a").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(ring.add("").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(ring.remove("b").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(*ring.owner(12345), "a");
  EXPECT_OK(ring.remove("a"));
  EXPECT_TRUE(ring.empty());
}

TEST(HashRing, KeysSpreadEvenlyOverNodes) {
  const int n = 10, keys = 200000;
  HashRing ring = ring_of(n);
  std::vector<std::string> o;
  for (const auto& [node, c] : owners(ring, keys, &o)) {
    const double share = static_cast<double>(c) / keys * n;
    EXPECT_GT(share, 0.7) << node;
    EXPECT_LT(share, 1.3) << node;
  }
}

TEST(HashRing, AddingOrRemovingOneOfNNodesMovesOnlyItsShareOfKeys) {
  const int n = 10, keys = 100000;
  HashRing ring = ring_of(n);
  std::vector<std::string> before, after;
  owners(ring, keys, &before);

  ASSERT_OK(ring.add("worker-new"));
  owners(ring, keys, &after);
  int moved = 0;
  for (int i = 0; i < keys; ++i) {
    if (before[static_cast<size_t>(i)] != after[static_cast<size_t>(i)]) {
      ++moved;
      EXPECT_EQ(after[static_cast<size_t>(i)], "worker-new") << "a key moved between old nodes";
    }
  }
  const double joined = static_cast<double>(moved) / keys;
  EXPECT_GT(joined, 0.6 / (n + 1));
  EXPECT_LT(joined, 1.4 / (n + 1));

  ASSERT_OK(ring.remove("worker-3"));
  std::vector<std::string> removed;
  owners(ring, keys, &removed);
  moved = 0;
  for (int i = 0; i < keys; ++i) {
    if (after[static_cast<size_t>(i)] != removed[static_cast<size_t>(i)]) {
      ++moved;
      EXPECT_EQ(after[static_cast<size_t>(i)], "worker-3") << "a key of a remaining node moved";
    }
  }
  const double left = static_cast<double>(moved) / keys;
  EXPECT_GT(left, 0.6 / (n + 1));
  EXPECT_LT(left, 1.4 / (n + 1));
  std::printf("join moved %.4f of keys (1/N = %.4f); leave moved %.4f\n", joined, 1.0 / (n + 1), left);
}

TEST(HashRing, PreferenceListIsDistinctAndStartsAtTheOwner) {
  HashRing ring = ring_of(5);
  for (uint64_t k = 0; k < 100; ++k) {
    const auto list = ring.preference_list(mix64(k));
    ASSERT_EQ(list.size(), 5u);
    EXPECT_EQ(list[0], *ring.owner(mix64(k)));
    EXPECT_EQ(std::set<std::string_view>(list.begin(), list.end()).size(), 5u);
    EXPECT_EQ(ring.preference_list(mix64(k), 2).size(), 2u);
  }
}

TEST(HashRing, CapacityIsTheCeilingOfOnePlusEpsilonTimesTheAverage) {
  EXPECT_EQ(HashRing::capacity(10, 4, 0.25), 4);   // ceil(3.125)
  EXPECT_EQ(HashRing::capacity(8, 4, 0.25), 3);    // ceil(2.5)
  EXPECT_EQ(HashRing::capacity(1, 8, 0.25), 1);    // at least 1
  EXPECT_EQ(HashRing::capacity(5, 0, 0.25), 0);
}

TEST(HashRing, BoundedLoadNeverExceedsCapacityUnderSkew) {
  const int n = 8;
  const double eps = 0.25;
  HashRing ring = ring_of(n);
  std::map<std::string, int64_t, std::less<>> load;
  for (const auto& name : ring.nodes()) load[name] = 0;
  auto load_of = [&](std::string_view node) { return load.find(node)->second; };
  EXPECT_EQ(ring.owner_bounded(1, load_of, 0.0).error().code, ErrorCode::kInvalidArgument);
  std::mt19937_64 rng(5);
  std::vector<std::string> placed;
  int64_t total = 0;
  for (int i = 0; i < 20000; ++i) {
    // 70% of keys are the same key: plain consistent hashing would put them all on one node.
    const uint64_t key = (rng() % 10 < 7) ? 42 : rng();
    auto who = ring.owner_bounded(key, load_of, eps);
    ASSERT_OK(who);
    const int64_t cap = HashRing::capacity(total + 1, n, eps);
    EXPECT_LT(load[std::string(*who)], cap);
    ++load[std::string(*who)];
    ++total;
    placed.emplace_back(*who);
    if (placed.size() > 200) {  // departures keep about 200 in the system
      const size_t j = rng() % placed.size();
      --load[placed[j]];
      --total;
      placed.erase(placed.begin() + static_cast<ptrdiff_t>(j));
    }
    for (const auto& [node, l] : load) ASSERT_LE(l, HashRing::capacity(total, n, eps)) << node;
  }
}

}  // namespace
}  // namespace tessera
