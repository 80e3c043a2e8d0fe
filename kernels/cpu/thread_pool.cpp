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
}  // namespace

struct ThreadPool::Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> generation{0};  // bumped once per region; workers run each one once
  std::atomic<bool> stop{false};
  std::atomic<int64_t> next{0};         // next task index to hand out
  std::atomic<int> pending{0};          // workers that have not finished the current region
  int64_t n_tasks = 0;                  // written before generation is bumped (release)
  void (*fn)(void*, int64_t) = nullptr;
  void* ctx = nullptr;
  std::vector<std::thread> threads;

  void work() {
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_tasks) return;
      fn(ctx, i);
    }
  }

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      for (int s = 0; s < kSpinIterations; ++s) {
        if (generation.load(std::memory_order_acquire) != seen || stop.load(std::memory_order_relaxed)) break;
        TS_CPU_RELAX();
      }
      if (generation.load(std::memory_order_acquire) == seen && !stop.load(std::memory_order_relaxed)) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return generation.load(std::memory_order_acquire) != seen || stop.load(); });
      }
      if (stop.load()) return;
      seen = generation.load(std::memory_order_acquire);
      work();
      pending.fetch_sub(1, std::memory_order_acq_rel);
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
  s.n_tasks = n_tasks;
  s.fn = fn;
  s.ctx = ctx;
  s.next.store(0, std::memory_order_relaxed);
  s.pending.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.generation.fetch_add(1, std::memory_order_release);
  }
  s.cv.notify_all();
  s.work();
  for (int spins = 0; s.pending.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinIterations) {
      TS_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace tessera::kernels
