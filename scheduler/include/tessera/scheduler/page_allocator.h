// The page allocator: one worker's fixed pool of K/V pages, as the scheduler sees it.
//
// Every page is in exactly one of the three states of DESIGN.md (K/V data model):
//   free    reference count 0, not in the radix index; on the free list;
//   held    reference count > 0 (in the block table of that many running sequences);
//   cached  reference count 0 and in the radix index (evictable once its node is unlocked).
// Invariant (check() verifies it, and tests call it after every scenario):
//   num_free() + num_held() + num_cached() == num_pages(), each page counted once.
//
// Transitions, all O(1):
//   allocate      free   -> held (count 1)
//   retain        held   -> held (count + 1), or cached -> held (count 1)
//   release       held   -> held (count - 1); at count 0 -> cached if indexed, else -> free
//   mark_indexed  held   -> held, now indexed (the radix index took the page)
//   evict         cached -> free (the radix index dropped the page)
// Calling a transition from the wrong state is a bug in the scheduler, not bad input: it is a
// TS_CHECK failure. allocate() running out of pages is a normal condition (kResourceExhausted).
//
// Thread-safety: none. One allocator per worker, driven by that worker's batcher thread.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/common/result.h"

namespace tessera::scheduler {

enum class PageState : uint8_t { kFree, kHeld, kCached };

struct PageCounts {
  int32_t total = 0;
  int32_t free = 0;
  int32_t held = 0;
  int32_t cached = 0;
};

class PageAllocator {
 public:
  explicit PageAllocator(int32_t num_pages);  // num_pages >= 1 (TS_CHECK)

  // Appends `count` fresh pages (count 1 each) to `out`. kResourceExhausted, and nothing
  // allocated, when fewer than `count` pages are free. kInvalidArgument when count < 0.
  Status allocate(int32_t count, std::vector<int32_t>& out);

  void retain(int32_t page);
  void release(int32_t page);
  void mark_indexed(int32_t page);
  void evict(int32_t page);

  PageState state(int32_t page) const;
  int32_t ref_count(int32_t page) const;
  bool indexed(int32_t page) const;
  bool valid(int32_t page) const { return page >= 0 && page < num_pages_; }

  int32_t num_pages() const { return num_pages_; }
  int32_t num_free() const { return static_cast<int32_t>(free_list_.size()); }
  int32_t num_held() const { return num_held_; }
  int32_t num_cached() const { return num_cached_; }
  PageCounts counts() const { return {num_pages_, num_free(), num_held_, num_cached_}; }

  // Full O(num_pages) audit: the state counters agree with the per-page data, every free page
  // is on the free list exactly once, and free + held + cached == total. The error names the
  // first discrepancy.
  Status check() const;

 private:
  void check_page(int32_t page) const;

  int32_t num_pages_;
  std::vector<int32_t> ref_;        // per page reference count
  std::vector<uint8_t> indexed_;    // per page: in the radix index
  std::vector<int32_t> free_list_;  // stack of free pages
  int32_t num_held_ = 0;
  int32_t num_cached_ = 0;
};

}  // namespace tessera::scheduler
