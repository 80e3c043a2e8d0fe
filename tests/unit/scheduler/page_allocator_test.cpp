#include "tessera/scheduler/page_allocator.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "tessera/testing/scenario.h"

namespace tessera::scheduler {
namespace {

void expect_counts(const PageAllocator& a, int32_t free, int32_t held, int32_t cached) {
  EXPECT_EQ(a.num_free(), free);
  EXPECT_EQ(a.num_held(), held);
  EXPECT_EQ(a.num_cached(), cached);
  EXPECT_EQ(a.num_free() + a.num_held() + a.num_cached(), a.num_pages());
  EXPECT_OK(a.check());
}

TEST(PageAllocator, EveryTransitionKeepsFreeHeldCachedSummingToTotal) {
  PageAllocator a(8);
  expect_counts(a, 8, 0, 0);
  std::vector<int32_t> pages;
  ASSERT_OK(a.allocate(3, pages));
  ASSERT_EQ(pages.size(), 3u);
  EXPECT_EQ(std::set<int32_t>(pages.begin(), pages.end()).size(), 3u);
  expect_counts(a, 5, 3, 0);
  a.retain(pages[0]);  // shared by a second sequence
  EXPECT_EQ(a.ref_count(pages[0]), 2);
  a.release(pages[0]);
  expect_counts(a, 5, 3, 0);
  a.mark_indexed(pages[0]);
  a.mark_indexed(pages[1]);
  a.release(pages[0]);  // indexed, count 0 -> cached
  a.release(pages[2]);  // not indexed -> free
  expect_counts(a, 6, 1, 1);
  EXPECT_EQ(a.state(pages[0]), PageState::kCached);
  EXPECT_EQ(a.state(pages[1]), PageState::kHeld);
  EXPECT_EQ(a.state(pages[2]), PageState::kFree);
  a.retain(pages[0]);  // a cache hit: cached -> held
  expect_counts(a, 6, 2, 0);
  a.release(pages[0]);
  a.release(pages[1]);
  expect_counts(a, 6, 0, 2);
  a.evict(pages[0]);
  a.evict(pages[1]);
  expect_counts(a, 8, 0, 0);
}

TEST(PageAllocator, ExhaustionIsAnErrorThatAllocatesNothing) {
  PageAllocator a(4);
  std::vector<int32_t> pages;
  ASSERT_OK(a.allocate(3, pages));
  auto st = a.allocate(2, pages);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kResourceExhausted);
  EXPECT_EQ(pages.size(), 3u);
  expect_counts(a, 1, 3, 0);
  EXPECT_EQ(a.allocate(-1, pages).error().code, ErrorCode::kInvalidArgument);
  ASSERT_OK(a.allocate(1, pages));
  expect_counts(a, 0, 4, 0);
  ASSERT_OK(a.allocate(0, pages));
}

TEST(PageAllocator, FreedPagesAreReusedAndNeverHandedOutTwice) {
  PageAllocator a(16);
  std::vector<int32_t> held;
  for (int round = 0; round < 100; ++round) {
    std::vector<int32_t> got;
    ASSERT_OK(a.allocate(1 + round % 5, got));
    for (int32_t p : got) {
      for (int32_t h : held) ASSERT_NE(p, h);
      held.push_back(p);
    }
    while (static_cast<int32_t>(held.size()) > 8) {
      a.release(held.front());
      held.erase(held.begin());
    }
    ASSERT_OK(a.check());
  }
}

TEST(PageAllocatorDeathTest, WrongStateTransitionsAreInvariantFailures) {
  PageAllocator a(2);
  EXPECT_DEATH(a.release(0), "not held");
  EXPECT_DEATH(a.evict(0), "not cached");
  EXPECT_DEATH(a.retain(1), "free page");
  EXPECT_DEATH(a.release(7), "outside pool");
}

}  // namespace
}  // namespace tessera::scheduler
