// A fixed pool of worker threads for data-parallel kernel regions.
//
// Idle policy: between parallel regions the workers spin for a short while (a few tens of
// microseconds, so back-to-back regions of a decode step do not pay a futex wake-up each) and
// then block on a condition variable; an idle pool uses no CPU.
//
// Thread-safety: run()/parallel_for() may be called from one thread at a time (the pool's
// owner); they are not reentrant (a task must not call back into the same pool). The calling
// thread takes part in the work, so a pool of size N starts N - 1 threads.
#pragma once

#include <cstdint>
#include <memory>
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

  // Calls fn(ctx, i) exactly once for every i in [0, n_tasks), spread over the threads (tasks
  // are taken dynamically), and returns when all calls have returned.
  void run(int64_t n_tasks, void (*fn)(void* ctx, int64_t task), void* ctx);

  template <class F>
  void parallel_for(int64_t n_tasks, F&& fn) {
    run(n_tasks, [](void* ctx, int64_t i) { (*static_cast<std::remove_reference_t<F>*>(ctx))(i); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  struct Shared;
  int n_threads_;
  std::unique_ptr<Shared> shared_;
};

}  // namespace tessera::kernels
