// K/V offload in the batcher (tessera/scheduler/kv_offload.h): evicted pages are planned as
// spills with the right block hashes before anything overwrites them, a later request with the
// same prefix — on the same worker or on another one sharing the directory — gets a KvReload of
// the continuation instead of a prefill, counts it as cached, and reads exactly its own K/V
// (the FakeWorker checks every position every sequence attends to); a miss is recomputed.
// The "kvstore" here is a map from block hash to the page's tag and simulated K/V; like the real
// worker, a reload uses a page only when its stored tag is the one the KvReload names, so a
// block-hash collision (another prefix's page under the same hash) is refused and recomputed.
#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

#include "batcher_harness.h"
#include "tessera/common/kv_digest.h"
#include "tessera/scheduler/kv_offload.h"
#include "tessera/scheduler/radix_index.h"

namespace tessera::testing {
namespace {

using scheduler::OffloadDirectory;
using scheduler::RadixIndex;
using PageData = std::vector<std::pair<int32_t, int32_t>>;

constexpr int32_t kPage = 4;

BatcherConfig small_pool() {
  return BatcherConfig{.page_size = kPage, .num_pages = 12, .max_context = 40, .max_step_tokens = 64,
                       .max_prefill_chunk = 64, .max_running = 4, .admission_headroom = 0};
}

// Block hashes of the prompt's full pages, as the radix index names them.
std::vector<uint64_t> chain(const Request& r, int32_t pages) {
  uint64_t h = RadixIndex::namespace_hash(r.ns.canonical());
  std::vector<uint64_t> out;
  for (int32_t i = 0; i < pages; ++i) {
    h = RadixIndex::block_hash(h, std::span(r.prompt).subspan(static_cast<size_t>(i * kPage), kPage));
    out.push_back(h);
  }
  return out;
}

// Tags of the prompt's full pages: the SHA-256 chain over the namespace key and the tokens.
std::vector<KvTag> tags(const Request& r, int32_t pages) {
  KvPrefixDigest d(r.ns.canonical());
  std::vector<KvTag> out;
  for (int32_t i = 0; i < pages; ++i) {
    d.add_page(std::span(r.prompt).subspan(static_cast<size_t>(i * kPage), kPage));
    out.push_back(d.tag());
  }
  return out;
}

struct Blob {
  KvTag tag{};
  PageData data;
};

class Offload : public ::testing::Test {
 protected:
  // Executes a plan the way a worker with --kv-offload does: spills first (read before anything
  // writes), then reloads, then the plan; every spill is reported stored at once.
  void run_step(Harness& h, bool lose_kvstore = false) {
    StepPlan p = h.plan();
    StepResult extra;
    for (const KvSpill& s : p.spills) {
      kvstore_[s.hash] = Blob{s.tag, h.worker.read_page(s.page)};
      extra.offloaded.push_back(s.hash);
      spilled_.push_back(s.hash);
      spill_tags_[s.hash] = s.tag;
    }
    if (lose_kvstore) kvstore_.clear();
    for (const KvReload& r : p.reloads) {
      ReloadResult rr{.request_id = r.request_id};
      EXPECT_EQ(r.tags.size(), r.pages.size());
      for (size_t i = 0; i < r.pages.size() && i < r.tags.size(); ++i) {
        auto it = kvstore_.find(r.hashes[i]);
        if (it == kvstore_.end()) break;
        if (it->second.tag != r.tags[i]) {  // another prefix's K/V under this hash: refused
          ++refused_;
          break;
        }
        h.worker.write_page(r.pages[i], it->second.data);
        ++rr.pages;
      }
      extra.reloads.push_back(rr);
      reloads_.push_back(r);
    }
    StepResult res = h.worker.execute(p);
    res.offloaded = extra.offloaded;
    res.reloads = extra.reloads;
    h.apply_result(res);
  }
  void run_until_idle(Harness& h, bool lose_kvstore_at_reload = false) {
    for (int i = 0; i < 200 && h.batcher->has_work() && !HasFailure(); ++i) run_step(h, lose_kvstore_at_reload);
  }
  // Fills the pool with unrelated prompts so the earlier prefix is evicted.
  void flood(Harness& h, uint64_t first_id) {
    for (uint64_t i = 0; i < 3; ++i) h.submit(make_request(first_id + i, iota_tokens(500 + static_cast<int32_t>(i) * 40, 30), 2));
    run_until_idle(h);
  }

  OffloadDirectory dir_{scheduler::OffloadConfig{.min_reload_pages = 2}};
  std::map<uint64_t, Blob> kvstore_;
  std::map<uint64_t, KvTag> spill_tags_;  // block hash -> the tag its spill carried
  int refused_ = 0;
  std::vector<uint64_t> spilled_;
  std::vector<KvReload> reloads_;
};

TEST_F(Offload, EvictedPrefixIsSpilledAndReloadedOnTheSameWorker) {
  Harness h(small_pool());
  h.batcher->enable_offload(&dir_);
  const Request a = make_request(1, iota_tokens(10, 26), 2);  // 6 full pages + 2 tokens
  h.submit(a);
  run_until_idle(h);
  flood(h, 100);
  // Every page of a's prompt was spilled under its block hash, with its prefix's tag.
  const auto hashes = chain(a, 6);
  const auto a_tags = tags(a, 6);
  for (size_t i = 0; i < hashes.size(); ++i) {
    EXPECT_NE(std::find(spilled_.begin(), spilled_.end(), hashes[i]), spilled_.end());
    EXPECT_TRUE(dir_.contains(hashes[i]));
    EXPECT_EQ(spill_tags_[hashes[i]], a_tags[i]) << "page " << i;
  }
  // The same prompt again: nothing of it is left in the radix index; all six pages come back.
  Request again = make_request(2, a.prompt, 3);
  h.submit(again);
  run_step(h);
  ASSERT_EQ(reloads_.size(), 1u);
  EXPECT_EQ(reloads_[0].request_id, 2u);
  EXPECT_EQ(reloads_[0].hashes, chain(a, 6));
  EXPECT_EQ(reloads_[0].tags, a_tags);
  EXPECT_EQ(h.plans_of(2).size(), 0u) << "a reload step computes nothing of the request";
  run_until_idle(h);
  const auto plans = h.plans_of(2);
  ASSERT_FALSE(plans.empty());
  EXPECT_EQ(plans[0].start_pos, 24) << "only the tokens after the reloaded pages are prefilled";
  const FinishEvent* f = h.finish_of(2);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->usage.cached_prompt_tokens, 24);
  EXPECT_EQ(dir_.stats().reloaded_pages, 6);
  EXPECT_EQ(dir_.stats().reload_missed_pages, 0);
  h.expect_invariants();
}

TEST_F(Offload, AnotherWorkerSharingTheDirectoryReloadsIt) {
  Harness a(small_pool()), b(small_pool());
  a.batcher->enable_offload(&dir_);
  b.batcher->enable_offload(&dir_);
  const Request r = make_request(1, iota_tokens(10, 26), 2);
  a.submit(r);
  run_until_idle(a);
  flood(a, 100);
  b.submit(make_request(7, r.prompt, 3));
  run_until_idle(b);
  ASSERT_EQ(reloads_.size(), 1u);
  const FinishEvent* f = b.finish_of(7);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->reason, FinishReason::kLength);
  EXPECT_EQ(f->usage.cached_prompt_tokens, 24);
  EXPECT_EQ(b.plans_of(7).front().start_pos, 24);
  b.expect_invariants();  // includes: worker b read exactly request 7's tokens at every position
}

TEST_F(Offload, AMissIsRecomputedAndLeavesTheDirectory) {
  Harness h(small_pool());
  h.batcher->enable_offload(&dir_);
  const Request a = make_request(1, iota_tokens(10, 26), 2);
  h.submit(a);
  run_until_idle(h);
  flood(h, 100);
  h.submit(make_request(2, a.prompt, 3));
  run_until_idle(h, /*lose_kvstore_at_reload=*/true);  // a lost Redis shard: nothing comes back
  const FinishEvent* f = h.finish_of(2);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->reason, FinishReason::kLength);
  EXPECT_EQ(f->usage.cached_prompt_tokens, 0) << "nothing was reused after all";
  EXPECT_EQ(h.plans_of(2).front().start_pos, 0);
  EXPECT_FALSE(dir_.contains(chain(a, 1)[0]));
  EXPECT_EQ(dir_.stats().reload_missed_pages, 6);
  h.expect_invariants();
}

// A crafted (or chance) block-hash collision: another prefix's page sits in the kvstore under
// the victim's hash. The reload refuses it (its tag names the other prefix), the scheduler
// recomputes, and the request reads exactly its own K/V at every position (expect_invariants),
// as a full recompute does; nothing is counted as cached.
TEST_F(Offload, AnotherPrefixsPageUnderTheSameHashIsRefusedAndRecomputed) {
  Harness h(small_pool());
  h.batcher->enable_offload(&dir_);
  const Request victim = make_request(1, iota_tokens(10, 26), 2);
  h.submit(victim);
  run_until_idle(h);
  flood(h, 100);
  const auto hashes = chain(victim, 6);
  ASSERT_TRUE(kvstore_.contains(hashes[0]));
  // The attacker's page under the victim's first block hash: other tokens' K/V (here: those of
  // the victim's second page), tagged as the attacker's spill tags it (its own namespace and tokens).
  Request attacker = make_request(100, iota_tokens(14, 26), 2);
  attacker.ns.tenant_salt = "tenant-evil";
  const Blob forged{.tag = tags(attacker, 1)[0], .data = kvstore_.at(hashes[1]).data};
  ASSERT_NE(forged.data, kvstore_.at(hashes[0]).data) << "other K/V: loading it would be wrong";
  kvstore_[hashes[0]] = forged;
  h.submit(make_request(2, victim.prompt, 3));
  run_until_idle(h);
  ASSERT_EQ(reloads_.size(), 1u) << "the directory still names the hash: a reload is tried";
  EXPECT_EQ(refused_, 1);
  const FinishEvent* f = h.finish_of(2);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->reason, FinishReason::kLength);
  EXPECT_EQ(f->usage.cached_prompt_tokens, 0) << "nothing was reused";
  EXPECT_EQ(h.plans_of(2).front().start_pos, 0) << "the whole prompt was recomputed";
  EXPECT_EQ(dir_.stats().reloaded_pages, 0);
  EXPECT_FALSE(dir_.contains(hashes[0])) << "the refused hash leaves the directory";
  h.expect_invariants();  // includes: request 2 read exactly its own tokens' K/V everywhere
}

TEST_F(Offload, ShortContinuationsAndOtherNamespacesAreNotReloaded) {
  Harness h(small_pool());
  h.batcher->enable_offload(&dir_);
  const Request a = make_request(1, iota_tokens(10, 26), 2);
  h.submit(a);
  run_until_idle(h);
  flood(h, 100);
  Request other = make_request(2, a.prompt, 2);
  other.ns.tenant_salt = "tenant-b";  // same tokens, another namespace: other block hashes
  h.submit(other);
  Request short_one = make_request(3, iota_tokens(10, 6), 2);  // one full page: below min_reload_pages
  h.submit(short_one);
  run_until_idle(h);
  EXPECT_TRUE(reloads_.empty());
  EXPECT_EQ(h.finish_of(2)->usage.cached_prompt_tokens, 0);
}

// Evicting a long cached prefix page by page (a decode that needs one more page per step while
// the pool is full of it: ensure_pages evicts exactly the missing page) hashes each page once:
// the spill tags come from the radix index (computed when the pages were indexed), not from
// rehashing the whole root-to-leaf path at every eviction (64 * 65 / 2 = 2080 page digests here).
TEST_F(Offload, EvictingALongLeafPageByPageHashesEachPageOnce) {
  constexpr int32_t kLeafPages = 64;
  Harness h(BatcherConfig{.page_size = kPage, .num_pages = kLeafPages + 4, .max_context = 400, .max_step_tokens = 512,
                          .max_prefill_chunk = 512, .max_running = 4, .admission_headroom = 0});
  h.batcher->enable_offload(&dir_);
  const Request a = make_request(1, iota_tokens(10, kLeafPages * kPage + 2), 1);  // one prefill: one 64-page leaf
  h.submit(a);
  run_until_idle(h);
  ASSERT_EQ(h.batcher->index().indexed_pages(), kLeafPages);
  ASSERT_EQ(h.batcher->index().num_nodes(), 2) << "the namespace root and one leaf";
  const uint64_t digests_before = KvPrefixDigest::pages_added();
  const int64_t inserted_before = h.batcher->index().stats().inserted_tokens;
  // A decode that grows one page per 4 tokens to the whole pool takes a's leaf page by page.
  h.submit(make_request(2, iota_tokens(5000, 2), (kLeafPages + 4) * kPage - 2));
  int one_page_evictions = 0;
  for (int i = 0; i < 400 && h.batcher->has_work() && !HasFailure(); ++i) {
    const size_t spilled = spilled_.size();
    run_step(h);
    one_page_evictions += spilled_.size() == spilled + 1 ? 1 : 0;
  }
  const auto& st = h.batcher->index().stats();
  EXPECT_EQ(st.evicted_tokens, static_cast<int64_t>(kLeafPages) * kPage) << "all of a's leaf was evicted";
  EXPECT_GE(one_page_evictions, kLeafPages - 4) << "one page per step";
  // Digests computed meanwhile: one per page the index took in (request 2's own pages), none
  // per eviction.
  const auto new_pages = static_cast<uint64_t>((st.inserted_tokens - inserted_before) / kPage);
  EXPECT_EQ(KvPrefixDigest::pages_added() - digests_before, new_pages);
  // Every spill of a's pages still carries the tag computed from scratch.
  const auto hashes = chain(a, kLeafPages);
  const auto a_tags = tags(a, kLeafPages);
  for (size_t i = 0; i < hashes.size(); ++i) {
    ASSERT_TRUE(spill_tags_.contains(hashes[i])) << "page " << i;
    EXPECT_EQ(spill_tags_[hashes[i]], a_tags[i]) << "page " << i;
  }
  h.expect_invariants();
}

TEST(OffloadDirectoryTest, BoundedLeastRecentlyUsed) {
  OffloadDirectory d(scheduler::OffloadConfig{.max_entries = 3});
  d.add(1);
  d.add(2);
  d.add(3);
  d.touch(1);
  d.add(4);  // 2 is the least recently used
  EXPECT_TRUE(d.contains(1));
  EXPECT_FALSE(d.contains(2));
  EXPECT_TRUE(d.contains(3) && d.contains(4));
  d.erase(3);
  EXPECT_EQ(d.size(), 2u);
}

}  // namespace
}  // namespace tessera::testing
