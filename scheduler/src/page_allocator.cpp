#include "tessera/scheduler/page_allocator.h"

#include <string>

#include "tessera/common/check.h"

namespace tessera::scheduler {

PageAllocator::PageAllocator(int32_t num_pages)
    : num_pages_(num_pages), ref_(static_cast<size_t>(num_pages), 0), indexed_(static_cast<size_t>(num_pages), 0) {
  TS_CHECK_GE(num_pages, 1) << "page pool must have at least one page";
  free_list_.reserve(static_cast<size_t>(num_pages));
  // Lowest page ids are handed out first (the free list is a stack).
  for (int32_t p = num_pages - 1; p >= 0; --p) free_list_.push_back(p);
}

void PageAllocator::check_page(int32_t page) const {
  TS_CHECK(valid(page)) << "page " << page << " outside pool of " << num_pages_;
}

Status PageAllocator::allocate(int32_t count, std::vector<int32_t>& out) {
  if (count < 0) return make_error(ErrorCode::kInvalidArgument, "allocate: negative page count " + std::to_string(count));
  if (count > num_free()) {
    return make_error(ErrorCode::kResourceExhausted, "allocate: " + std::to_string(count) + " pages wanted, " +
                                                         std::to_string(num_free()) + " free");
  }
  for (int32_t i = 0; i < count; ++i) {
    const int32_t p = free_list_.back();
    free_list_.pop_back();
    TS_DCHECK(ref_[p] == 0 && !indexed_[p]);
    ref_[p] = 1;
    out.push_back(p);
  }
  num_held_ += count;
  return ok_status();
}

void PageAllocator::retain(int32_t page) {
  check_page(page);
  if (ref_[page] == 0) {
    TS_CHECK(indexed_[page]) << "retain of free page " << page;
    --num_cached_;
    ++num_held_;
  }
  ++ref_[page];
}

void PageAllocator::release(int32_t page) {
  check_page(page);
  TS_CHECK_GT(ref_[page], 0) << "release of page " << page << " that is not held";
  if (--ref_[page] > 0) return;
  --num_held_;
  if (indexed_[page]) {
    ++num_cached_;
  } else {
    free_list_.push_back(page);
  }
}

void PageAllocator::mark_indexed(int32_t page) {
  check_page(page);
  TS_CHECK_GT(ref_[page], 0) << "only a held page can enter the radix index (page " << page << ")";
  TS_CHECK(!indexed_[page]) << "page " << page << " is already indexed";
  indexed_[page] = 1;
}

void PageAllocator::evict(int32_t page) {
  check_page(page);
  TS_CHECK(indexed_[page] && ref_[page] == 0) << "evict of page " << page << " that is not cached (ref "
                                               << ref_[page] << ")";
  indexed_[page] = 0;
  --num_cached_;
  free_list_.push_back(page);
}

PageState PageAllocator::state(int32_t page) const {
  check_page(page);
  if (ref_[page] > 0) return PageState::kHeld;
  return indexed_[page] ? PageState::kCached : PageState::kFree;
}

int32_t PageAllocator::ref_count(int32_t page) const {
  check_page(page);
  return ref_[page];
}

bool PageAllocator::indexed(int32_t page) const {
  check_page(page);
  return indexed_[page] != 0;
}

Status PageAllocator::check() const {
  auto fail = [](std::string msg) { return make_error(ErrorCode::kInternal, "page allocator: " + std::move(msg)); };
  std::vector<uint8_t> on_free_list(static_cast<size_t>(num_pages_), 0);
  for (int32_t p : free_list_) {
    if (!valid(p)) return fail("free list holds invalid page " + std::to_string(p));
    if (on_free_list[p]) return fail("page " + std::to_string(p) + " is on the free list twice");
    on_free_list[p] = 1;
  }
  int32_t free = 0, held = 0, cached = 0;
  for (int32_t p = 0; p < num_pages_; ++p) {
    if (ref_[p] < 0) return fail("page " + std::to_string(p) + " has negative count");
    const bool is_free = ref_[p] == 0 && !indexed_[p];
    if (is_free != static_cast<bool>(on_free_list[p])) {
      return fail("page " + std::to_string(p) + (is_free ? " is free but not on the free list" : " is on the free list but not free"));
    }
    if (ref_[p] > 0) {
      ++held;
    } else if (indexed_[p]) {
      ++cached;
    } else {
      ++free;
    }
  }
  if (held != num_held_ || cached != num_cached_ || free != num_free()) {
    return fail("counters (free " + std::to_string(num_free()) + ", held " + std::to_string(num_held_) + ", cached " +
                std::to_string(num_cached_) + ") disagree with pages (free " + std::to_string(free) + ", held " +
                std::to_string(held) + ", cached " + std::to_string(cached) + ")");
  }
  if (free + held + cached != num_pages_) {
    return fail("free + held + cached = " + std::to_string(free + held + cached) + " != total " +
                std::to_string(num_pages_));
  }
  return ok_status();
}

}  // namespace tessera::scheduler
