// read_bandwidth: the machine's sequential memory read bandwidth, STREAM-style, as the ceiling
// for decode (weight bytes per token x tokens/s; docs/BENCHMARKS.md).
//
//   read_bandwidth [MiB per thread = 512] [threads = 1] [reps = 5]
//
// Each thread sums its own buffer (far larger than the caches; filled once, so every page is
// resident) with 8 independent 64-bit accumulators, reps times; the best and median pass over
// all threads together are printed in GB/s (1e9 bytes/s), wall clock, and per CPU-second
// (bytes / the threads' CPU time: steady on a loaded machine, comparable with engine_bench's
// tokens per CPU-second). AVX2 loads; no arguments beyond the three positional ones.
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

}  // namespace

int main(int argc, char** argv) {
  const long mib = argc > 1 ? std::atol(argv[1]) : 512;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  if (mib <= 0 || threads <= 0 || reps <= 0) {
    std::fprintf(stderr, "usage: read_bandwidth [MiB per thread > 0] [threads > 0] [reps > 0]\n");
    return 2;
  }
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
