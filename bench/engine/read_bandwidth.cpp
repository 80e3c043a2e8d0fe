// read_bandwidth: the machine's sequential memory read bandwidth, STREAM-style, as the ceiling
// for decode (weight bytes per token x tokens/s; docs/BENCHMARKS.md).
//
//   read_bandwidth [MiB per thread = 512] [threads = 1] [reps = 5]
//   read_bandwidth --roofline [MiB in all = 512] [threads = 1] [reps = 5]
//
// Plain mode: each thread sums its own buffer (far larger than the caches; filled once, so
// every page is resident) with 8 independent 64-bit accumulators, reps times; the best and
// median pass over all threads together are printed in GB/s (1e9 bytes/s), wall clock, and per
// CPU-second (bytes / the threads' CPU time: steady on a loaded machine, comparable with
// engine_bench's tokens per CPU-second). AVX2 loads, 4 KiB pages, 2 KiB prefetch into L1.
//
// --roofline: the best read rate this machine reaches for a weight-sized buffer, the reference
// for "% of read bandwidth" of a decode (weight bytes per token x tokens/s). The MiB are the
// total, split evenly over the threads (as a decode splits the weight rows), in 2 MiB-aligned
// buffers with madvise(MADV_HUGEPAGE) (as the load-time repacked weights), AVX-512 loads where
// the CPU has them (AVX2 otherwise), 8 accumulators, and one software prefetch per 64-byte line
// into L2 (PREFETCHT1) at each distance of kAheadKiB; a line per distance gives the median and
// best of reps passes, the last line the roofline: the best distance's median (wall clock and
// per CPU-second).
#include <immintrin.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace {

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// AVX2 (the project's baseline ISA): 4 independent 256-bit accumulators, 128 bytes per step,
// so the loop is bound by the loads, not by the adds; software prefetch 2 KiB ahead, as the
// decode kernels do (without it one core reached ~10 GB/s here, less than the kernels).
constexpr size_t kPrefetchBytes = 2048;
__attribute__((target("avx2"))) uint64_t sum_buffer(const uint64_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 16 <= n; i += 16) {
    const auto* v = reinterpret_cast<const __m256i*>(p + i);
    _mm_prefetch(reinterpret_cast<const char*>(p + i) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i) + kPrefetchBytes + 64, _MM_HINT_T0);
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(v));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(v + 1));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(v + 2));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(v + 3));
  }
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return out[0] + out[1] + out[2] + out[3];
}

// Roofline loop: 512 bytes per step (8 accumulators), PREFETCHT1 `ahead` bytes past each line.
template <class V, int kLanes>
uint64_t reduce(const V* a) {
  alignas(64) uint64_t out[kLanes * 8];
  std::memcpy(out, a, sizeof(out));
  uint64_t s = 0;
  for (uint64_t v : out) s += v;
  return s;
}
__attribute__((target("avx512f"))) uint64_t sum_avx512(const uint8_t* p, size_t bytes, size_t ahead) {
  __m512i a[8];
  for (__m512i& v : a) v = _mm512_setzero_si512();
  for (size_t i = 0; i + 512 <= bytes; i += 512) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      if (ahead != 0) _mm_prefetch(reinterpret_cast<const char*>(p + i + 64 * k + ahead), _MM_HINT_T1);
      a[k] = _mm512_add_epi64(a[k], _mm512_load_si512(p + i + 64 * k));
    }
  }
  return reduce<__m512i, 8>(a);
}
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, size_t bytes, size_t ahead) {
  __m256i a[8];
  for (__m256i& v : a) v = _mm256_setzero_si256();
  for (size_t i = 0; i + 256 <= bytes; i += 256) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      if (ahead != 0) _mm_prefetch(reinterpret_cast<const char*>(p + i + 64 * k + ahead), _MM_HINT_T1);
      a[2 * k] = _mm256_add_epi64(a[2 * k], _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64 * k)));
      a[2 * k + 1] = _mm256_add_epi64(a[2 * k + 1], _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64 * k + 32)));
    }
  }
  return reduce<__m256i, 4>(a);
}

struct Pass {
  double gbs, gbs_cpu;
};

// One pass of `threads` threads, thread t summing bufs[t] (bytes each) with fn.
Pass run_pass(const std::vector<uint8_t*>& bufs, size_t bytes, const std::function<uint64_t(const uint8_t*)>& fn,
              uint64_t* check) {
  const size_t threads = bufs.size();
  std::vector<uint64_t> sums(threads);
  std::vector<double> cpu(threads);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const double c0 = thread_cpu_s();
      sums[t] = fn(bufs[t]);
      cpu[t] = thread_cpu_s() - c0;
    });
  }
  for (std::thread& th : pool) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double cpu_s = 0;
  for (size_t t = 0; t < threads; ++t) {
    *check += sums[t];
    cpu_s += cpu[t];
  }
  const double total = static_cast<double>(bytes) * static_cast<double>(threads);
  return {total / s / 1e9, total / cpu_s / 1e9};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The process's anonymous memory on transparent huge pages, KiB (-1 if unknown).
long anon_huge_kib() {
  FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "AnonHugePages: %ld kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib;
}

int roofline(long mib, int threads, int reps) {
  constexpr size_t kHuge = size_t{2} << 20;
  constexpr int kAheadKiB[] = {0, 1, 2, 4, 6, 8, 12, 16};
  const size_t bytes = (static_cast<size_t>(mib) << 20) / static_cast<size_t>(threads) / 512 * 512;
  const size_t alloc = (bytes + kHuge - 1) / kHuge * kHuge;
  std::vector<uint8_t*> bufs;
  for (int t = 0; t < threads; ++t) {
    auto* b = static_cast<uint8_t*>(std::aligned_alloc(kHuge, alloc));
    if (b == nullptr) {
      std::fprintf(stderr, "read_bandwidth: cannot allocate %zu bytes\n", alloc);
      return 1;
    }
    (void)::madvise(b, alloc, MADV_HUGEPAGE);  // advisory, as for the packed weights
    for (size_t i = 0; i < alloc; ++i) b[i] = static_cast<uint8_t>(i * 131 + static_cast<size_t>(t));
    bufs.push_back(b);
  }
  const bool avx512 = __builtin_cpu_supports("avx512f");
  uint64_t check = 0;
  double best_med = 0, best_med_cpu = 0;
  int best_ahead = 0, best_ahead_cpu = 0;
  for (const int kib : kAheadKiB) {
    const size_t ahead = static_cast<size_t>(kib) * 1024;
    auto fn = [&](const uint8_t* p) { return avx512 ? sum_avx512(p, bytes, ahead) : sum_avx2(p, bytes, ahead); };
    run_pass(bufs, bytes, fn, &check);  // warm-up: TLB, frequency
    std::vector<double> gbs, gbs_cpu;
    for (int r = 0; r < reps; ++r) {
      const Pass p = run_pass(bufs, bytes, fn, &check);
      gbs.push_back(p.gbs);
      gbs_cpu.push_back(p.gbs_cpu);
    }
    const double med = median(gbs), med_cpu = median(gbs_cpu);
    std::printf("roofline %s, %d thread(s) x %.1f MiB, prefetch %2d KiB ahead into L2: wall median %.1f GB/s (best %.1f); per CPU-s median %.1f GB/s\n",
                avx512 ? "avx512" : "avx2", threads, static_cast<double>(bytes) / (1 << 20), kib, med,
                *std::max_element(gbs.begin(), gbs.end()), med_cpu);
    if (med > best_med) {
      best_med = med;
      best_ahead = kib;
    }
    if (med_cpu > best_med_cpu) {
      best_med_cpu = med_cpu;
      best_ahead_cpu = kib;
    }
  }
  const long huge_kib = anon_huge_kib();
  for (uint8_t* b : bufs) std::free(b);
  std::printf("read roofline: %d thread(s) x %ld MiB in all, %d reps, %ld of %zu MiB on huge pages: %.1f GB/s wall "
              "(median, prefetch %d KiB), %.1f GB/s per CPU-s (median, prefetch %d KiB) (checksum %llu)\n",
              threads, mib, reps, huge_kib / 1024, alloc * static_cast<size_t>(threads) >> 20, best_med, best_ahead,
              best_med_cpu, best_ahead_cpu, static_cast<unsigned long long>(check % 1000));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool roof = argc > 1 && std::strcmp(argv[1], "--roofline") == 0;
  if (roof) {
    --argc;
    ++argv;
  }
  const long mib = argc > 1 ? std::atol(argv[1]) : 512;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  if (mib <= 0 || threads <= 0 || reps <= 0 || argc > 4) {
    std::fprintf(stderr,
                 "usage: read_bandwidth [MiB per thread > 0] [threads > 0] [reps > 0]\n"
                 "       read_bandwidth --roofline [MiB in all > 0] [threads > 0] [reps > 0]\n");
    return 2;
  }
  if (roof) return roofline(mib, threads, reps);
  const size_t words = static_cast<size_t>(mib) * 1024 * 1024 / 8;
  std::vector<std::vector<uint64_t>> bufs(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    bufs[static_cast<size_t>(t)].resize(words);
    for (size_t i = 0; i < words; ++i) bufs[static_cast<size_t>(t)][i] = i ^ static_cast<size_t>(t);
  }
  std::vector<double> gbs, gbs_cpu;
  uint64_t check = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    std::vector<double> cpu(static_cast<size_t>(threads));
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const double c0 = thread_cpu_s();
        sums[static_cast<size_t>(t)] = sum_buffer(bufs[static_cast<size_t>(t)].data(), words);
        cpu[static_cast<size_t>(t)] = thread_cpu_s() - c0;
      });
    }
    for (std::thread& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (uint64_t v : sums) check += v;
    gbs.push_back(static_cast<double>(words * 8) * threads / s / 1e9);
    double cpu_s = 0;
    for (double c : cpu) cpu_s += c;
    gbs_cpu.push_back(static_cast<double>(words * 8) * threads / cpu_s / 1e9);
  }
  std::sort(gbs.begin(), gbs.end());
  std::sort(gbs_cpu.begin(), gbs_cpu.end());
  std::printf("read bandwidth: %d thread(s) x %ld MiB, %d reps: wall best %.1f GB/s, median %.1f GB/s; per CPU-s best %.1f GB/s, median %.1f GB/s (checksum %llu)\n",
              threads, mib, reps, gbs.back(), gbs[gbs.size() / 2], gbs_cpu.back(), gbs_cpu[gbs_cpu.size() / 2],
              static_cast<unsigned long long>(check % 1000));
  return 0;
}
