#include "tessera/kernels/thread_pool.h"

#include <algorithm>
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
constexpr size_t kLine = 64;

// What one participant prefetches once out of tasks (ThreadPool::hint_prefetch).
struct Hint {
  ThreadPool::PrefetchRange ranges[ThreadPool::kMaxPrefetchRanges];
  int n = 0;
};

// One participant's share of a region's tasks: it takes them from the front, one at a time;
// a participant that has finished its own share takes the rest of the others' the same way.
// Line-aligned (two lines with the hint): a participant's claims do not move the line another
// one is claiming from until it steals.
struct alignas(kLine) Share {
  std::atomic<int64_t> next{0};
  int64_t end = 0;
  Hint hint;  // what this participant prefetches once out of tasks
};

// Prefetches h's ranges into L2, 8 lines at a time, until stop() says the wait is over.
template <class Stop>
void prefetch_while_idle(const Hint& h, Stop&& stop) {
  for (int k = 0; k < h.n; ++k) {
    const char* p = static_cast<const char*>(h.ranges[k].p);
    const size_t bytes = h.ranges[k].bytes;
    for (size_t off = 0; off < bytes; off += 8 * kLine) {
      if (stop()) return;
#if defined(__x86_64__) || defined(__i386__)
      for (size_t l = off; l < std::min(bytes, off + 8 * kLine); l += kLine) _mm_prefetch(p + l, _MM_HINT_T1);
#else
      for (size_t l = off; l < std::min(bytes, off + 8 * kLine); l += kLine) __builtin_prefetch(p + l, 0, 2);
#endif
    }
  }
}

// One parallel region, on the caller's stack for the duration of run(). Participant p (the
// caller is 0, worker thread i is i) owns tasks [p * n / N, (p + 1) * n / N), or the caller's
// bounds [bounds[p], bounds[p + 1]): a decode step's
// back-to-back matmuls then give each thread the same rows every time, and a claim is an
// uncontended atomic on the thread's own line. Finished tasks are added to `done` once per
// participant per region.
struct Region {
  void (*fn)(void*, int64_t) = nullptr;
  void* ctx = nullptr;
  int64_t n_tasks = 0;
  int n_shares = 0;
  Share* shares = nullptr;
  alignas(kLine) std::atomic<int64_t> done{0};

  void work(int self) {
    int64_t finished = 0;
    for (int k = 0; k < n_shares; ++k) {
      Share& s = shares[(self + k) % n_shares];
      for (;;) {
        if (s.next.load(std::memory_order_relaxed) >= s.end) break;
        const int64_t i = s.next.fetch_add(1, std::memory_order_relaxed);
        if (i >= s.end) break;
        fn(ctx, i);
        ++finished;
      }
    }
    if (finished > 0) done.fetch_add(finished, std::memory_order_release);
  }
};

}  // namespace

// Protocol: the caller publishes `region`, bumps `generation` and works itself. A region is
// over when all its tasks are done; the caller then unpublishes it and waits only for workers
// that are inside it (`active`), never for workers that are asleep or descheduled — a late
// worker finds no region (or a later one) and goes back to waiting, and its share was taken
// by the others. `active` is incremented before `region` is read and the caller clears
// `region` before reading `active` (both seq_cst), so a worker that can still see a region is
// always counted. The caller writes `generation` and `region` (one line); the workers write
// `active` (another).
struct ThreadPool::Shared {
  alignas(kLine) std::atomic<uint64_t> generation{0};
  std::atomic<Region*> region{nullptr};
  std::atomic<bool> stop{false};
  alignas(kLine) std::atomic<int> active{0};
  std::atomic<int> sleepers{0};
  alignas(kLine) std::mutex mu;
  std::condition_variable cv;
  std::vector<std::thread> threads;
  std::vector<Hint> pending;  // per participant, for the next run(); the caller's thread only
  // Per participant, rewritten by each run() (only once every worker has left the last region:
  // run() returns after `active` drops to 0), read by the region's participants.
  std::unique_ptr<Share[]> shares;

  void worker_loop(int self) {
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
      Hint hint;
      if (Region* r = region.load(std::memory_order_seq_cst)) {
        r->work(self);
        hint = r->shares[self].hint;  // copied while the region is alive
      }
      active.fetch_sub(1, std::memory_order_seq_cst);
      prefetch_while_idle(hint, [&] { return generation.load(std::memory_order_relaxed) != seen; });
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads), shared_(std::make_unique<Shared>()) {
  TS_CHECK_GE(n_threads, 1);
  shared_->pending.resize(static_cast<size_t>(n_threads));
  shared_->shares = std::make_unique<Share[]>(static_cast<size_t>(n_threads));
  for (int i = 1; i < n_threads; ++i) shared_->threads.emplace_back([s = shared_.get(), i] { s->worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stop.store(true);
  }
  shared_->cv.notify_all();
  for (auto& t : shared_->threads) t.join();
}

void ThreadPool::hint_prefetch(int participant, std::span<const PrefetchRange> ranges) {
  TS_CHECK(participant >= 0 && participant < n_threads_) << "hint_prefetch: participant " << participant;
  Hint& h = shared_->pending[static_cast<size_t>(participant)];
  h.n = 0;
  for (const PrefetchRange& r : ranges) {
    if (h.n == kMaxPrefetchRanges) break;
    if (r.p != nullptr && r.bytes > 0) h.ranges[h.n++] = r;
  }
}

void ThreadPool::run(int64_t n_tasks, void (*fn)(void*, int64_t), void* ctx, const int64_t* bounds) {
  Shared& s = *shared_;
  if (bounds != nullptr && n_tasks > 0) {
    TS_CHECK_EQ(bounds[0], 0) << "ThreadPool::run: share bounds must start at 0";
    TS_CHECK_EQ(bounds[n_threads_], n_tasks) << "ThreadPool::run: share bounds must end at n_tasks";
    for (int p = 0; p < n_threads_; ++p) TS_CHECK_LE(bounds[p], bounds[p + 1]) << "ThreadPool::run: share bounds must not decrease";
  }
  if (n_tasks <= 0 || n_threads_ == 1 || n_tasks == 1) {
    for (Hint& h : s.pending) h.n = 0;
    for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i);
    return;
  }
  Share* shares = s.shares.get();
  for (int p = 0; p < n_threads_; ++p) {
    shares[p].next.store(bounds != nullptr ? bounds[p] : n_tasks * p / n_threads_, std::memory_order_relaxed);
    shares[p].end = bounds != nullptr ? bounds[p + 1] : n_tasks * (p + 1) / n_threads_;
    shares[p].hint = s.pending[static_cast<size_t>(p)];
    s.pending[static_cast<size_t>(p)].n = 0;
  }
  Region r;
  r.fn = fn;
  r.ctx = ctx;
  r.n_tasks = n_tasks;
  r.n_shares = n_threads_;
  r.shares = shares;
  s.region.store(&r, std::memory_order_seq_cst);
  s.generation.fetch_add(1, std::memory_order_seq_cst);
  if (s.sleepers.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(s.mu); }  // a sleeper between its check and wait sees the new generation
    s.cv.notify_all();
  }
  r.work(0);
  prefetch_while_idle(shares[0].hint, [&] { return r.done.load(std::memory_order_relaxed) >= n_tasks; });
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
