// Pinned prefixes (batcher.h "Pinning"): a pinned prefix survives any eviction pressure until
// unpinned, the pin budget is enforced, and the errors name what is wrong.
#include <gtest/gtest.h>

#include "batcher_harness.h"

namespace tessera::testing {
namespace {

using scheduler::PinnedPrefix;

// Runs one request to its end so that its prompt's full pages are cached.
void run_prompt(Harness& h, uint64_t id, const std::vector<int32_t>& prompt) {
  h.submit(make_request(id, prompt, 1));
  h.run_until_idle(64);
  ASSERT_NE(h.finish_of(id), nullptr);
}

TEST(BatcherPin, APinnedPrefixIsNeverEvictedAndComesBackAfterUnpin) {
  Harness h(BatcherConfig{.page_size = 4, .num_pages = 16, .max_context = 64, .max_step_tokens = 64, .max_running = 4});
  const auto system = iota_tokens(100, 9);  // two full pages + one token
  run_prompt(h, 1, system);
  auto pinned = h.batcher->pin(make_request(0, system, 1).ns, system);
  ASSERT_TRUE(pinned.ok()) << pinned.error().to_string();
  EXPECT_EQ(pinned->tokens, 8);
  EXPECT_EQ(pinned->pages, 2);
  EXPECT_EQ(h.batcher->pinned_pages(), 2);
  // Pinning it again is idempotent: the same pin, no more pages.
  auto again = h.batcher->pin(make_request(0, system, 1).ns, system);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->hash, pinned->hash);
  EXPECT_EQ(h.batcher->pinned_pages(), 2);
  ASSERT_EQ(h.batcher->pins().size(), 1u);

  // Enough other traffic to cycle the whole pool several times over.
  for (uint64_t id = 10; id < 30; ++id) run_prompt(h, id, iota_tokens(static_cast<int32_t>(1000 + id * 50), 13));
  h.expect_invariants();
  auto r = make_request(40, system, 1);
  EXPECT_EQ(h.batcher->cached_prefix_tokens(r), 8) << "the pinned pages were evicted";

  ASSERT_TRUE(h.batcher->unpin(pinned->hash).ok());
  EXPECT_EQ(h.batcher->pinned_pages(), 0);
  EXPECT_TRUE(h.batcher->pins().empty());
  EXPECT_EQ(h.batcher->unpin(pinned->hash).error().code, ErrorCode::kNotFound);
  for (uint64_t id = 50; id < 70; ++id) run_prompt(h, id, iota_tokens(static_cast<int32_t>(5000 + id * 50), 13));
  EXPECT_EQ(h.batcher->cached_prefix_tokens(r), 0) << "unpinned pages should age out like any others";
  h.expect_invariants();
}

TEST(BatcherPin, ErrorsNameTheProblem) {
  Harness h(BatcherConfig{.page_size = 4, .num_pages = 16, .max_context = 64, .max_step_tokens = 64, .max_running = 4,
                          .max_pinned_pages = 3});
  const auto ns = make_request(0, {1}, 1).ns;
  auto shorter = h.batcher->pin(ns, iota_tokens(100, 3));
  ASSERT_FALSE(shorter.ok());
  EXPECT_EQ(shorter.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(shorter.error().message.find("at least one whole page"), std::string::npos) << shorter.error().message;

  auto uncached = h.batcher->pin(ns, iota_tokens(100, 8));
  ASSERT_FALSE(uncached.ok());
  EXPECT_EQ(uncached.error().code, ErrorCode::kNotFound);
  EXPECT_NE(uncached.error().message.find("only 0 of the prefix's 8 tokens"), std::string::npos) << uncached.error().message;

  run_prompt(h, 1, iota_tokens(100, 8));  // computes positions 0..8: pages 0 and 1 full
  auto partly = h.batcher->pin(ns, iota_tokens(100, 12));
  ASSERT_FALSE(partly.ok());
  EXPECT_NE(partly.error().message.find("only 8 of the prefix's 12 tokens"), std::string::npos) << partly.error().message;

  ASSERT_TRUE(h.batcher->pin(ns, iota_tokens(100, 8)).ok());
  run_prompt(h, 2, iota_tokens(300, 9));
  auto over = h.batcher->pin(ns, iota_tokens(300, 8));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(over.error().message.find("2 of 3 pages are pinned"), std::string::npos) << over.error().message;
  // Another namespace never sees this one's pages.
  auto other = ns;
  other.tenant_salt = "tenant:1:b";
  EXPECT_EQ(h.batcher->pin(other, iota_tokens(100, 8)).error().code, ErrorCode::kNotFound);
  h.expect_invariants();
}

TEST(BatcherPin, APrefixOfAPinnedPrefixSplitsItsNodeAndBothStayValid) {
  Harness h(BatcherConfig{.page_size = 4, .num_pages = 32, .max_context = 64, .max_step_tokens = 64, .max_running = 4});
  const auto ns = make_request(0, {1}, 1).ns;
  run_prompt(h, 1, iota_tokens(100, 17));
  auto whole = h.batcher->pin(ns, iota_tokens(100, 16));
  ASSERT_TRUE(whole.ok());
  auto head = h.batcher->pin(ns, iota_tokens(100, 8));  // ends inside the pinned node: splits it
  ASSERT_TRUE(head.ok());
  EXPECT_NE(head->hash, whole->hash);
  EXPECT_EQ(h.batcher->pinned_pages(), 6);  // each pin counts all its pages
  h.expect_invariants();
  ASSERT_TRUE(h.batcher->unpin(whole->hash).ok());
  for (uint64_t id = 10; id < 40; ++id) run_prompt(h, id, iota_tokens(static_cast<int32_t>(1000 + id * 50), 13));
  EXPECT_EQ(h.batcher->cached_prefix_tokens(make_request(99, iota_tokens(100, 17), 1)), 8)
      << "the head stays pinned, the rest ages out";
  h.expect_invariants();
}

TEST(RadixPrefixes, ListsNodesMostHitFirstWithTheirLocks) {
  Harness h(BatcherConfig{.page_size = 4, .num_pages = 32, .max_context = 64, .max_step_tokens = 64, .max_running = 4});
  run_prompt(h, 1, iota_tokens(100, 9));
  run_prompt(h, 2, iota_tokens(100, 9));
  run_prompt(h, 3, iota_tokens(100, 9));
  run_prompt(h, 4, iota_tokens(500, 5));
  const auto list = h.batcher->index().prefixes(10);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].end_tokens, 8);
  EXPECT_EQ(list[0].hits, 2);  // requests 2 and 3 matched it
  EXPECT_EQ(list[0].lock_count, 0);
  EXPECT_EQ(list[1].end_tokens, 4);
  EXPECT_EQ(list[1].hits, 0);
  auto pinned = h.batcher->pin(make_request(0, {1}, 1).ns, iota_tokens(100, 8));
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(h.batcher->index().prefixes(1).at(0).hash, pinned->hash);
  EXPECT_EQ(h.batcher->index().prefixes(1).at(0).lock_count, 1);
}

}  // namespace
}  // namespace tessera::testing
