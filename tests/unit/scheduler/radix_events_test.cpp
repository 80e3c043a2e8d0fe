// The radix index's block hashes and observer (K/V events, docs/protocol.md "K/V events"): an
// observer that applies every stored/removed event reconstructs exactly what for_each_block()
// reports, through inserts that split nodes, matches, locks and evictions that trim and merge;
// the hashes follow the documented chain.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "tessera/common/hash.h"
#include "tessera/common/kv_digest.h"
#include "tessera/scheduler/radix_index.h"

namespace tessera::scheduler {
namespace {

constexpr int32_t kPage = 4;

struct Block {
  uint64_t ns = 0, parent = 0;
  int32_t page = 0;
  std::vector<int32_t> tokens;
  bool operator==(const Block&) const = default;
};

class Mirror : public RadixObserver {
 public:
  void on_stored(uint64_t ns, std::span<const RadixBlock> blocks, std::span<const int32_t> tokens) override {
    ASSERT_EQ(tokens.size(), blocks.size() * kPage);
    for (size_t i = 0; i < blocks.size(); ++i) {
      ASSERT_EQ(blocks[i].parent_hash, i == 0 ? blocks[0].parent_hash : blocks[i - 1].hash);
      std::vector<int32_t> page(tokens.begin() + static_cast<ptrdiff_t>(i * kPage), tokens.begin() + static_cast<ptrdiff_t>((i + 1) * kPage));
      ASSERT_EQ(blocks[i].hash, RadixIndex::block_hash(blocks[i].parent_hash, page));
      ASSERT_TRUE(blocks_.emplace(blocks[i].hash, Block{ns, blocks[i].parent_hash, blocks[i].page, std::move(page)}).second)
          << "stored twice";
      ++stored;
    }
  }
  void on_removed(std::span<const RadixBlock> blocks) override {
    for (const auto& b : blocks) {
      auto it = blocks_.find(b.hash);
      ASSERT_NE(it, blocks_.end()) << "removed an unknown block";
      EXPECT_EQ(it->second.page, b.page);
      blocks_.erase(it);
      ++removed;
    }
  }
  const std::map<uint64_t, Block>& blocks() const { return blocks_; }
  int stored = 0, removed = 0;

 private:
  std::map<uint64_t, Block> blocks_;
};

std::map<uint64_t, Block> index_blocks(const RadixIndex& index) {
  std::map<uint64_t, Block> out;
  index.for_each_block([&](uint64_t ns, const RadixBlock& b, std::span<const int32_t> tokens) {
    out[b.hash] = Block{ns, b.parent_hash, b.page, std::vector<int32_t>(tokens.begin(), tokens.end())};
  });
  return out;
}

TEST(RadixEventsTest, FirstPageHashChainsFromTheNamespace) {
  PageAllocator alloc(8);
  RadixIndex index(alloc, kPage);
  Mirror mirror;
  index.set_observer(&mirror);
  const KvNamespace ns{.model_fingerprint = "model-a"};
  std::vector<int32_t> pages;
  ASSERT_TRUE(alloc.allocate(2, pages).ok());
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(index.insert(ns, tokens, pages).ok());
  // The namespace hash: keyed (kv_name_hash); no secret is set in this process, so unkeyed SHA-256.
  const uint64_t ns_hash = kv_name_hash("tessera-kv-namespace-v1", ns.canonical());
  EXPECT_EQ(RadixIndex::namespace_hash(ns.canonical()), ns_hash);
  EXPECT_NE(ns_hash, fnv1a64(ns.canonical())) << "not the invertible FNV-1a";
  const uint64_t h0 = hash_combine(ns_hash, hash_tokens(std::vector<int32_t>{1, 2, 3, 4}));
  const uint64_t h1 = hash_combine(h0, hash_tokens(std::vector<int32_t>{5, 6, 7, 8}));
  ASSERT_EQ(mirror.blocks().size(), 2u);
  EXPECT_EQ(mirror.blocks().at(h0).parent, ns_hash);
  EXPECT_EQ(mirror.blocks().at(h0).ns, ns_hash);
  EXPECT_EQ(mirror.blocks().at(h1).parent, h0);
  EXPECT_EQ(mirror.blocks().at(h1).page, pages[1]);
  for (int32_t p : pages) alloc.release(p);
}

TEST(RadixEventsTest, EventsReconstructTheIndexThroughSplitsEvictionsAndMerges) {
  PageAllocator alloc(64);
  RadixIndex index(alloc, kPage);
  Mirror mirror;
  index.set_observer(&mirror);
  const KvNamespace spaces[] = {{.model_fingerprint = "m"}, {.model_fingerprint = "m", .tenant_salt = "t"}};
  std::mt19937 rng(7);
  for (int step = 0; step < 600; ++step) {
    const KvNamespace& ns = spaces[rng() % 2];
    // Prompts over a small alphabet share prefixes often, so inserts split and dedupe.
    const int32_t n_pages = 1 + static_cast<int32_t>(rng() % 5);
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < n_pages * kPage; ++i) tokens.push_back(static_cast<int32_t>(i < 8 ? rng() % 2 : rng() % 3));
    if (rng() % 4 == 0) {
      (void)index.match(ns, tokens);  // may split a node
    } else {
      if (alloc.num_free() < n_pages) index.evict(n_pages - alloc.num_free() + static_cast<int32_t>(rng() % 4));
      std::vector<int32_t> pages;
      if (!alloc.allocate(n_pages, pages).ok()) continue;
      auto r = index.insert(ns, tokens, pages);
      ASSERT_TRUE(r.ok()) << r.error().to_string();
      ASSERT_TRUE(index.lock(r->handle).ok());
      ASSERT_TRUE(index.unlock(r->handle).ok());
      for (int32_t p : pages) alloc.release(p);
    }
    ASSERT_TRUE(index.check().ok()) << index.check().error().to_string();
    ASSERT_EQ(mirror.blocks(), index_blocks(index)) << "after step " << step;
  }
  EXPECT_GT(mirror.stored, 100);
  EXPECT_GT(mirror.removed, 50);
  index.evict(1 << 20);
  EXPECT_TRUE(mirror.blocks().empty());
}

}  // namespace
}  // namespace tessera::scheduler
