// Scenario tests of the radix prefix index over pages: split, merge, eviction, locks,
// namespaces and stale handles. Every scenario ends with the page invariant and the index's own
// invariants holding (TearDown).
#include "tessera/scheduler/radix_index.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <span>
#include <vector>

#include "tessera/common/kv_digest.h"
#include "tessera/testing/scenario.h"

namespace tessera::scheduler {
namespace {

using tessera::testing::Scenario;

constexpr int32_t kPage = 4;

std::vector<int32_t> seq(int32_t first, int32_t count) {
  std::vector<int32_t> v(static_cast<size_t>(count));
  std::iota(v.begin(), v.end(), first);
  return v;
}
std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class RadixScenario : public ::testing::Test {
 protected:
  void TearDown() override {
    const PageCounts c = alloc.counts();
    EXPECT_EQ(c.free + c.held + c.cached, c.total);
    EXPECT_OK(alloc.check());
    EXPECT_OK(index.check());
  }

  // Computes `tokens` into fresh pages as a finished sequence would: allocate, insert, release.
  // Returns the pages now cached.
  std::vector<int32_t> cache(const KvNamespace& space, const std::vector<int32_t>& tokens) {
    std::vector<int32_t> pages;
    EXPECT_OK(alloc.allocate(static_cast<int32_t>(tokens.size()) / kPage, pages));
    auto r = index.insert(space, tokens, pages);
    EXPECT_TRUE(r.ok());
    for (int32_t p : pages) alloc.release(p);
    return r.ok() ? r->pages : std::vector<int32_t>{};
  }

  PageAllocator alloc{32};
  RadixIndex index{alloc, kPage};
  KvNamespace ns{.model_fingerprint = "model-a"};
};

TEST_F(RadixScenario, InsertSplitsOnDivergenceAndMatchReturnsLongestFullPagePrefix) {
  std::vector<int32_t> a_pages;
  const auto a = seq(0, 12);                                 // 3 pages
  const auto b = cat(seq(0, 8), seq(100, 4));                // shares 2 pages with a
  Scenario("split on partial match")
      .Given("a cached 3-page sequence A", [&] { a_pages = cache(ns, a); })
      .When("B, sharing A's first 2 pages then diverging, is inserted", [&] {
        std::vector<int32_t> b_pages;
        ASSERT_OK(alloc.allocate(3, b_pages));
        auto r = index.insert(ns, b, b_pages);
        ASSERT_OK(r);
        EXPECT_EQ(r->new_tokens, 4);
        // The index keeps its own pages for the shared part; B's duplicates stay B's to release.
        EXPECT_EQ(r->pages, (std::vector<int32_t>{a_pages[0], a_pages[1], b_pages[2]}));
        for (int32_t p : b_pages) alloc.release(p);
      })
      .Then("the node of A is split into a 2-page prefix with two 1-page children", [&] {
        EXPECT_EQ(index.num_nodes(), 4);  // root, prefix, A's tail, B's tail
        auto m = index.match(ns, seq(0, 8));
        EXPECT_EQ(m.matched_tokens, 8);
        auto info = index.inspect(m.handle);
        ASSERT_OK(info);
        EXPECT_EQ(info->own_tokens, 8);
        EXPECT_EQ(info->num_children, 2);
      })
      .And("a query shares only full pages: 9 shared tokens match 8", [&] {
        auto q = cat(seq(0, 9), seq(500, 7));
        EXPECT_EQ(index.match(ns, q).matched_tokens, 8);
        EXPECT_EQ(index.peek(ns, q), 8);
      })
      .And("a query shorter than a page matches nothing", [&] {
        EXPECT_EQ(index.match(ns, seq(0, 3)).matched_tokens, 0);
        EXPECT_TRUE(index.match(ns, seq(0, 3)).handle.empty());
      });
}

TEST_F(RadixScenario, MatchEndingInsideANodeSplitsItAndKeepsTheDeeperHandleValid) {
  InsertResult full;
  Scenario("split on match")
      .Given("a locked 4-page sequence in one node", [&] {
        std::vector<int32_t> pages;
        ASSERT_OK(alloc.allocate(4, pages));
        auto r = index.insert(ns, seq(0, 16), pages);
        ASSERT_OK(r);
        full = *r;
        ASSERT_OK(index.lock(full.handle));
        EXPECT_EQ(index.num_nodes(), 2);
      })
      .When("a query matches its first 2 pages", [&] {
        auto m = index.match(ns, cat(seq(0, 8), seq(900, 8)));
        EXPECT_EQ(m.matched_tokens, 8);
        EXPECT_EQ(m.pages, (std::vector<int32_t>{full.pages[0], full.pages[1]}));
      })
      .Then("the node is split, the prefix node inherits the lock, and the old handle still works", [&] {
        EXPECT_EQ(index.num_nodes(), 3);
        EXPECT_FALSE(index.is_stale(full.handle));
        auto info = index.inspect(full.handle);
        ASSERT_OK(info);
        EXPECT_EQ(info->end_tokens, 16);
        EXPECT_EQ(info->own_tokens, 8);
        EXPECT_EQ(info->lock_count, 1);
        EXPECT_EQ(index.evictable_pages(), 0);
        ASSERT_OK(index.unlock(full.handle));
        for (int32_t p : full.pages) alloc.release(p);
        EXPECT_EQ(index.evictable_pages(), 4);
      });
}

TEST_F(RadixScenario, EvictionTrimsLeastRecentlyUsedLeavesAndMergesAParentLeftWithOneChild) {
  std::vector<int32_t> a_pages, b_pages;
  const auto a = cat(seq(0, 8), seq(100, 8));  // prefix P (2 pages) + 2 pages
  const auto b = cat(seq(0, 8), seq(200, 4));  // prefix P + 1 page
  Scenario("evict and merge")
      .Given("A and B cached under a shared 2-page prefix, B used more recently", [&] {
        a_pages = cache(ns, a);
        b_pages = cache(ns, b);
        EXPECT_EQ(index.num_nodes(), 4);
        EXPECT_EQ(alloc.num_cached(), 5);
        index.match(ns, b);  // touch B
      })
      .When("one page is evicted", [&] { EXPECT_EQ(index.evict(1), 1); })
      .Then("A's last page goes first (LRU leaf, from its end)", [&] {
        EXPECT_EQ(alloc.state(a_pages[3]), PageState::kFree);
        EXPECT_EQ(alloc.state(a_pages[2]), PageState::kCached);
        EXPECT_EQ(index.match(ns, a).matched_tokens, 12);
      })
      .When("B's leaf is evicted entirely (B made least recent)", [&] {
        index.match(ns, a);  // A (and the prefix) now more recent than B
        EXPECT_EQ(index.evict(1), 1);
        EXPECT_EQ(alloc.state(b_pages[2]), PageState::kFree);
      })
      .Then("the prefix node, left with A's tail as only child, is merged with it", [&] {
        EXPECT_EQ(index.num_nodes(), 2);  // root + one merged node
        auto m = index.match(ns, a);
        EXPECT_EQ(m.matched_tokens, 12);
        auto info = index.inspect(m.handle);
        ASSERT_OK(info);
        EXPECT_EQ(info->own_tokens, 12);
        EXPECT_EQ(index.stats().evicted_tokens, 2 * kPage);
      })
      .And("evicting more than is cached frees what there is and drops the namespace", [&] {
        EXPECT_EQ(index.evict(100), 3);
        EXPECT_EQ(index.num_nodes(), 0);
        EXPECT_EQ(index.num_namespaces(), 0);
        EXPECT_EQ(alloc.num_free(), alloc.num_pages());
      });
}

// The evict hook's tags (K/V offload): kept per page from the insert on, split by a split
// (insert or match ending inside a node), joined by a merge, tagged at once for pages indexed
// before the hook was set; every page's tag equals the one computed from scratch over its
// namespace key and path, and evicting hashes nothing.
TEST_F(RadixScenario, EvictHookTagsSurviveSplitsAndMergesAndEqualTagsFromScratch) {
  const auto a = seq(0, 24);                                   // 6 pages
  const auto b = cat(seq(0, 8), seq(100, 12));                 // shares 2 pages with a
  const auto d = cat(seq(0, 16), seq(200, 8));                 // shares 4 pages with a
  std::map<uint64_t, KvTag> spilled;                           // block hash -> tag the hook got
  int hook_calls = 0;
  auto hook = [&](uint64_t ns_hash, std::span<const RadixBlock> blocks, std::span<const KvTag> tags) {
    ++hook_calls;
    EXPECT_EQ(ns_hash, RadixIndex::namespace_hash(ns.canonical()));
    ASSERT_EQ(tags.size(), blocks.size());
    for (size_t j = 0; j < blocks.size(); ++j) EXPECT_TRUE(spilled.emplace(blocks[j].hash, tags[j]).second);
  };
  uint64_t digests_at_eviction = 0;
  Scenario("tags through splits and merges")
      .Given("A cached before the hook is set, then the hook (set, dropped, set: re-tagged each time)", [&] {
        cache(ns, a);
        index.set_evict_hook(hook);
        EXPECT_OK(index.check());
        index.set_evict_hook({});
        EXPECT_OK(index.check());
        index.set_evict_hook(hook);
        EXPECT_OK(index.check());
      })
      .When("B splits A's node on insert, a match splits A's tail, D hangs under that split", [&] {
        cache(ns, b);
        EXPECT_EQ(index.match(ns, seq(0, 16)).matched_tokens, 16);
        cache(ns, d);
        EXPECT_EQ(index.num_nodes(), 6);  // root, [0,2), A's [2,4), A's [4,6), B's tail, D's tail
        EXPECT_OK(index.check());
      })
      .Then("evicting everything (one page at a time, then the rest at once) hands over 11 tags", [&] {
        digests_at_eviction = KvPrefixDigest::pages_added();
        for (int i = 0; i < 5; ++i) {
          EXPECT_EQ(index.evict(1), 1);
          EXPECT_OK(index.check());
        }
        EXPECT_EQ(index.evict(100), 6);
        EXPECT_EQ(index.num_nodes(), 0);
        EXPECT_EQ(KvPrefixDigest::pages_added(), digests_at_eviction) << "eviction hashes nothing";
        EXPECT_EQ(spilled.size(), 11u);
        EXPECT_GE(hook_calls, 6);
      })
      .And("each is the tag computed from scratch over the namespace key and the path", [&] {
        for (const auto* path : {&a, &b, &d}) {
          KvPrefixDigest dg(ns.canonical());
          uint64_t h = RadixIndex::namespace_hash(ns.canonical());
          for (size_t i = 0; i < path->size() / kPage; ++i) {
            const auto page = std::span(*path).subspan(i * kPage, kPage);
            dg.add_page(page);
            h = RadixIndex::block_hash(h, page);
            ASSERT_TRUE(spilled.contains(h)) << "page " << i;
            EXPECT_EQ(spilled.at(h), dg.tag()) << "page " << i;
          }
        }
      });
}

TEST_F(RadixScenario, LockPreventsEviction) {
  MatchResult m;
  Scenario("lock prevents eviction")
      .Given("a cached 3-page prefix and another cached 1-page sequence", [&] {
        cache(ns, seq(0, 12));
        cache(ns, seq(50, 4));
      })
      .When("the 3-page prefix is matched and locked, and eviction asks for every page", [&] {
        m = index.match(ns, seq(0, 12));
        ASSERT_OK(index.lock(m.handle));
        EXPECT_EQ(index.evictable_pages(), 1);
        EXPECT_EQ(index.evict(32), 1);
      })
      .Then("only the unlocked page was evicted; the locked prefix still matches", [&] {
        for (int32_t p : m.pages) EXPECT_EQ(alloc.state(p), PageState::kCached);
        EXPECT_EQ(index.peek(ns, seq(0, 12)), 12);
        EXPECT_EQ(index.peek(ns, seq(50, 4)), 0);
      })
      .And("after unlock it can be evicted", [&] {
        ASSERT_OK(index.unlock(m.handle));
        EXPECT_EQ(index.evict(32), 3);
        EXPECT_EQ(alloc.num_free(), 32);
      })
      .And("unlocking again is rejected, not crashed", [&] { EXPECT_FALSE(index.unlock(m.handle).ok()); });
}

TEST_F(RadixScenario, NamespacesNeverShare) {
  const KvNamespace tenant_b{.model_fingerprint = "model-a", .tenant_salt = "tenant-b"};
  const KvNamespace other_model{.model_fingerprint = "model-b"};
  const KvNamespace user_1{.model_fingerprint = "model-a", .user = "u1", .preference_hash = 7, .alpha = 0.5f};
  const KvNamespace user_2{.model_fingerprint = "model-a", .user = "u2", .preference_hash = 7, .alpha = 0.5f};
  const KvNamespace user_1_alpha{.model_fingerprint = "model-a", .user = "u1", .preference_hash = 7, .alpha = 0.6f};
  const auto tokens = seq(0, 8);
  Scenario("namespace isolation")
      .Given("the same tokens cached for model-a and for user u1", [&] {
        cache(ns, tokens);
        cache(user_1, tokens);
      })
      .Then("each namespace matches only its own", [&] {
        EXPECT_EQ(index.match(ns, tokens).matched_tokens, 8);
        EXPECT_EQ(index.match(user_1, tokens).matched_tokens, 8);
        EXPECT_NE(index.match(ns, tokens).pages, index.match(user_1, tokens).pages);
      })
      .And("another tenant, model, user or alpha matches nothing", [&] {
        EXPECT_EQ(index.match(tenant_b, tokens).matched_tokens, 0);
        EXPECT_EQ(index.match(other_model, tokens).matched_tokens, 0);
        EXPECT_EQ(index.match(user_2, tokens).matched_tokens, 0);
        EXPECT_EQ(index.match(user_1_alpha, tokens).matched_tokens, 0);
        EXPECT_EQ(index.num_namespaces(), 2);
      })
      .And("canonical encodings cannot be confused by moving bytes between fields", [&] {
        const KvNamespace x{.model_fingerprint = "ab", .tenant_salt = "c"};
        const KvNamespace y{.model_fingerprint = "a", .tenant_salt = "bc"};
        EXPECT_NE(x.canonical(), y.canonical());
      });
}

TEST_F(RadixScenario, StaleHandleIsRejected) {
  MatchResult m;
  Scenario("stale handle rejected")
      .Given("a handle from matching a cached prefix, not locked", [&] {
        cache(ns, seq(0, 8));
        m = index.match(ns, seq(0, 8));
        EXPECT_FALSE(index.is_stale(m.handle));
      })
      .When("the prefix is evicted and its node slot reused by another insert", [&] {
        EXPECT_EQ(index.evict(2), 2);
        cache(ns, seq(300, 8));
      })
      .Then("lock, unlock and inspect with the old handle fail with invalid_argument", [&] {
        EXPECT_TRUE(index.is_stale(m.handle));
        auto st = index.lock(m.handle);
        ASSERT_FALSE(st.ok());
        EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
        EXPECT_FALSE(index.unlock(m.handle).ok());
        EXPECT_FALSE(index.inspect(m.handle).ok());
      })
      .And("a trimmed node's old handle is stale too", [&] {
        auto h = index.match(ns, seq(300, 8)).handle;
        EXPECT_EQ(index.evict(1), 1);
        EXPECT_TRUE(index.is_stale(h));
      });
}

TEST_F(RadixScenario, InsertRejectsBadPagesAndChangesNothing) {
  std::vector<int32_t> pages;
  ASSERT_OK(alloc.allocate(2, pages));
  EXPECT_EQ(index.insert(ns, seq(0, 7), pages).error().code, ErrorCode::kInvalidArgument);  // not 2 full pages
  EXPECT_FALSE(index.insert(ns, seq(0, 8), std::vector<int32_t>{pages[0], pages[0]}).ok());
  EXPECT_FALSE(index.insert(ns, seq(0, 8), std::vector<int32_t>{pages[0], 31}).ok());  // 31 is free, not held
  EXPECT_FALSE(index.insert(ns, seq(0, 8), std::vector<int32_t>{pages[0], 99}).ok());  // outside the pool
  EXPECT_EQ(index.num_nodes(), 0);
  EXPECT_EQ(index.num_namespaces(), 0);
  auto ok = index.insert(ns, seq(0, 8), pages);
  ASSERT_OK(ok);
  // The same pages under another key would be indexed twice.
  EXPECT_FALSE(index.insert(ns, seq(40, 8), pages).ok());
  for (int32_t p : pages) alloc.release(p);
  EXPECT_EQ(index.stats().inserted_tokens, 8);
}

TEST_F(RadixScenario, StatsCountQueriedHitInsertedEvicted) {
  cache(ns, seq(0, 8));
  index.match(ns, seq(0, 10));              // 10 queried, 8 hit
  index.match(ns, seq(100, 6));             // 6 queried, 0 hit
  EXPECT_EQ(index.evict(1), 1);
  const RadixStats& s = index.stats();
  EXPECT_EQ(s.queried_tokens, 16);
  EXPECT_EQ(s.hit_tokens, 8);
  EXPECT_EQ(s.inserted_tokens, 8);
  EXPECT_EQ(s.evicted_tokens, 4);
  EXPECT_EQ(s.matches, 2);
}

}  // namespace
}  // namespace tessera::scheduler
