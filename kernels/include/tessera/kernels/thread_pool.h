// A fixed pool of worker threads for data-parallel kernel regions.
//
// Idle policy: between parallel regions the workers spin for a short while (a few tens of
// microseconds, so back-to-back regions of a decode step do not pay a futex wake-up each) and
// then block on a condition variable; an idle pool uses no CPU.
//
// Scheduling: participant p of N (the caller is 0) owns a contiguous share of a region's n
// tasks, [p * n / N, (p + 1) * n / N) or [bounds[p], bounds[p + 1]) when the caller gives
// bounds (tasks of unequal size), and takes them in order; once its share is done it takes
// what is left of the others'. Back-to-back regions over the same data (a decode step's
// matmuls) so give each thread the same rows every time, each streaming one contiguous range.
//
// Idle prefetch: hint_prefetch() names, per participant, the memory it will read first in the
// region after the next one (the next matmul's weights). A participant that runs out of tasks
// in the next region prefetches its ranges into its L2 instead of only spinning — a worker
// until the caller starts another region, the caller until the region's last task is done — so
// the time one thread waits for the other (serial code between regions, uneven last tasks)
// moves weight bytes. A hint, never needed for correctness; the ranges must stay mapped.
//
// Thread-safety: run()/parallel_for()/hint_prefetch() may be called from one thread at a time
// (the pool's owner); they are not reentrant (a task must not call back into the same pool).
// The calling thread takes part in the work, so a pool of size N starts N - 1 threads.
#pragma once

#include <cstdint>
#include <cstddef>
#include <memory>
#include <span>
#include <type_traits>

namespace tessera::kernels {

class ThreadPool {
 public:
  // n_threads >= 1 participants in total, the caller included.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  struct PrefetchRange {
    const void* p = nullptr;
    size_t bytes = 0;
  };
  static constexpr int kMaxPrefetchRanges = 4;  // per participant; later ones are dropped
  // For the next run() only (see above); participant in [0, size()). Replaces an earlier hint
  // for that participant that no run() has taken yet.
  void hint_prefetch(int participant, std::span<const PrefetchRange> ranges);

  // Calls fn(ctx, i) exactly once for every i in [0, n_tasks), spread over the threads, and
  // returns when all calls have returned. bounds: null, or size() + 1 share starts,
  // non-decreasing from 0 to n_tasks (checked, on every path).
  void run(int64_t n_tasks, void (*fn)(void* ctx, int64_t task), void* ctx, const int64_t* bounds = nullptr);

  template <class F>
  void parallel_for(int64_t n_tasks, F&& fn, const int64_t* bounds = nullptr) {
    run(n_tasks, [](void* ctx, int64_t i) { (*static_cast<std::remove_reference_t<F>*>(ctx))(i); },
        const_cast<void*>(static_cast<const void*>(&fn)), bounds);
  }

 private:
  struct Shared;
  int n_threads_;
  std::unique_ptr<Shared> shared_;
};

}  // namespace tessera::kernels
