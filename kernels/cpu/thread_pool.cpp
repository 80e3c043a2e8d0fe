#include "tessera/kernels/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/common/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TS_CPU_RELAX() _mm_pause()
#else
#define TS_CPU_RELAX() ((void)0)
#endif

namespace tessera::kernels {
namespace {

// ~30-60 us of pause loops on current x86 before a worker blocks on the condition variable.
constexpr int kSpinIterations = 1 << 11;

// One parallel region, on the caller's stack for the duration of run().
struct Region {
  void (*fn)(void*, int64_t) = nullptr;
  void* ctx = nullptr;
  int64_t n_tasks = 0;
  std::atomic<int64_t> next{0};  // next task index to hand out
  std::atomic<int64_t> done{0};  // tasks finished

  void work() {
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_tasks) return;
      fn(ctx, i);
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

}  // namespace

// Protocol: the caller publishes `region`, bumps `generation` and works itself. A region is
// over when all its tasks are done; the caller then unpublishes it and waits only for workers
// that are inside it (`active`), never for workers that are asleep or descheduled — a late
// worker finds no region (or a later one) and goes back to waiting. `active` is incremented
// before `region` is read and the caller clears `region` before reading `active` (both
// seq_cst), so a worker that can still see a region is always counted.
struct ThreadPool::Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> generation{0};
  std::atomic<Region*> region{nullptr};
  std::atomic<int> active{0};
  std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      for (int s = 0; s < kSpinIterations; ++s) {
        if (generation.load(std::memory_order_acquire) != seen || stop.load(std::memory_order_relaxed)) break;
        TS_CPU_RELAX();
      }
      if (generation.load(std::memory_order_acquire) == seen && !stop.load()) {
        std::unique_lock<std::mutex> lock(mu);
        sleepers.fetch_add(1);
        cv.wait(lock, [&] { return generation.load() != seen || stop.load(); });
        sleepers.fetch_sub(1);
      }
      if (stop.load()) return;
      seen = generation.load(std::memory_order_acquire);
      active.fetch_add(1, std::memory_order_seq_cst);
      if (Region* r = region.load(std::memory_order_seq_cst)) r->work();
      active.fetch_sub(1, std::memory_order_seq_cst);
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads), shared_(std::make_unique<Shared>()) {
  TS_CHECK_GE(n_threads, 1);
  for (int i = 1; i < n_threads; ++i) shared_->threads.emplace_back([s = shared_.get()] { s->worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stop.store(true);
  }
  shared_->cv.notify_all();
  for (auto& t : shared_->threads) t.join();
}

void ThreadPool::run(int64_t n_tasks, void (*fn)(void*, int64_t), void* ctx) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i);
    return;
  }
  Shared& s = *shared_;
  Region r;
  r.fn = fn;
  r.ctx = ctx;
  r.n_tasks = n_tasks;
  s.region.store(&r, std::memory_order_seq_cst);
  s.generation.fetch_add(1, std::memory_order_seq_cst);
  if (s.sleepers.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(s.mu); }  // a sleeper between its check and wait sees the new generation
    s.cv.notify_all();
  }
  r.work();
  for (int spins = 0; r.done.load(std::memory_order_acquire) < n_tasks; ++spins) {
    if (spins < kSpinIterations) {
      TS_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  s.region.store(nullptr, std::memory_order_seq_cst);
  for (int spins = 0; s.active.load(std::memory_order_seq_cst) != 0; ++spins) {
    if (spins < kSpinIterations) {
      TS_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace tessera::kernels
