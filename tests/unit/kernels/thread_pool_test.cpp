#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tessera/kernels/thread_pool.h"

namespace tessera::kernels {
namespace {

TEST(ThreadPool, EveryTaskRunsExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 3, 17, 1000}) {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << threads << " " << n;
      }
    }
  }
}

TEST(ThreadPool, UsesSeveralThreads) {
  ThreadPool pool(2);
  // Tasks that wait until two distinct threads have entered: this returns only if the pool
  // really runs tasks concurrently (bounded wait, no sleeps).
  std::atomic<int> entered{0};
  std::atomic<bool> ok{true};
  pool.parallel_for(2, [&](int64_t) {
    entered.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (entered.load() < 2) {
      if (std::chrono::steady_clock::now() > deadline) {
        ok = false;
        return;
      }
      std::this_thread::yield();
    }
  });
  EXPECT_TRUE(ok.load());
}

// Participant 1 (the worker) owns tasks [2, 4) of 4; task 2 waits until task 3 has run. Whoever
// runs task 2 is stuck there, so the region finishes only if the other participant takes task
// 3 from that share (bounded wait, no sleeps).
TEST(ThreadPool, AFinishedParticipantTakesTheRestOfAnotherShare) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 200; ++rep) {
    std::atomic<bool> third_done{false};
    std::atomic<bool> ok{true};
    std::vector<std::atomic<int>> hits(4);
    pool.parallel_for(4, [&](int64_t i) {
      hits[static_cast<size_t>(i)].fetch_add(1);
      if (i == 3) third_done.store(true);
      if (i != 2) return;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!third_done.load()) {
        if (std::chrono::steady_clock::now() > deadline) {
          ok = false;
          return;
        }
        std::this_thread::yield();
      }
    });
    ASSERT_TRUE(ok.load()) << "rep " << rep;
    for (int i = 0; i < 4; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "rep " << rep << " task " << i;
  }
}

// Caller-given share bounds (tasks of unequal cost): empty shares, the caller's included, and
// shares of every size still run every task exactly once; bounds that do not span the tasks or
// decrease are refused on every path.
TEST(ThreadPool, ShareBoundsOfAnySizeRunEveryTaskOnce) {
  ThreadPool pool(3);
  const std::vector<std::vector<int64_t>> cases = {
      {0, 0, 0, 5}, {0, 5, 5, 5}, {0, 0, 5, 5}, {0, 1, 2, 3}, {0, 2, 2, 9}, {0, 9, 9, 9}, {0, 0, 0, 1}};
  for (const auto& b : cases) {
    for (int rep = 0; rep < 50; ++rep) {
      const int64_t n = b.back();
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); }, b.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << b[1] << " " << b[2] << " " << n;
    }
  }
  const int64_t bad_end[] = {0, 1, 2, 4}, bad_start[] = {1, 1, 2, 3}, bad_order[] = {0, 2, 1, 3};
  EXPECT_DEATH(pool.parallel_for(3, [](int64_t) {}, bad_end), "end at n_tasks");
  EXPECT_DEATH(pool.parallel_for(3, [](int64_t) {}, bad_start), "start at 0");
  EXPECT_DEATH(pool.parallel_for(3, [](int64_t) {}, bad_order), "must not decrease");
  const int64_t one_bad[] = {0, 0, 0, 2};
  EXPECT_DEATH(pool.parallel_for(1, [](int64_t) {}, one_bad), "end at n_tasks");  // the serial path checks too
}

// Prefetch hints change nothing a region computes, are taken by the next region only, and may
// name ranges that are read by nobody (idle participants only prefetch them).
TEST(ThreadPool, PrefetchHintsLeaveResultsUnchanged) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> data(1 << 18, 1.0f);
    for (int rep = 0; rep < 100; ++rep) {
      for (int p = 0; p < threads; ++p) {
        const ThreadPool::PrefetchRange r[] = {{data.data() + p * 1000, 4096 * sizeof(float)}, {nullptr, 64},
                                               {data.data(), 0}, {data.data() + 7, 100}, {data.data(), 64},
                                               {data.data(), 64}};
        pool.hint_prefetch(p, r);  // the empty ones are skipped, the sixth is over kMaxPrefetchRanges
      }
      const int64_t n = 1 + rep % 37;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << threads << " " << n;
    }
  }
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

TEST(ThreadPool, IdleWorkersDoNotBurnCpu) {
  ThreadPool pool(4);
  pool.parallel_for(8, [](int64_t) {});
  // Measure the process's CPU time over an idle interval of wall time. (The sleep is the
  // measurement window, not a synchronization.) Spinning workers would use ~3 x 0.3 s.
  const double c0 = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double used = cpu_seconds() - c0;
  EXPECT_LT(used, 0.05) << "idle pool used " << used << " s of CPU in 0.3 s";
}

}  // namespace
}  // namespace tessera::kernels
