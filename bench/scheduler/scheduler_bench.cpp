// Scheduler microbenchmarks: radix match and insert throughput, and the time to plan one step
// of continuous batching with 256 and 1024 running sequences (target: <= 200 us at 256), and
// evicting a long cached prompt page by page with K/V offload on (spill tags).
//
//   build-x/bin/scheduler_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tessera/scheduler/batcher.h"
#include "tessera/scheduler/kv_offload.h"
#include "tessera/scheduler/radix_index.h"
#include "tessera/scheduler/router.h"

namespace tessera::scheduler {
namespace {

constexpr int32_t kPage = 16;

// 64 shared 128-token prefixes, each sequence 256 tokens.
std::vector<std::vector<int32_t>> make_prompts(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> groups(64, std::vector<int32_t>(128));
  for (auto& g : groups) {
    for (auto& t : g) t = static_cast<int32_t>(rng() % 32000);
  }
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(count));
  for (auto& p : out) {
    p = groups[rng() % groups.size()];
    for (int i = 0; i < 128; ++i) p.push_back(static_cast<int32_t>(rng() % 32000));
  }
  return out;
}

void cache_all(PageAllocator& alloc, RadixIndex& index, const KvNamespace& ns, const std::vector<std::vector<int32_t>>& prompts) {
  for (const auto& p : prompts) {
    std::vector<int32_t> pages;
    if (!alloc.allocate(static_cast<int32_t>(p.size()) / kPage, pages).ok()) std::abort();
    auto r = index.insert(ns, p, pages);
    if (!r.ok()) std::abort();
    for (int32_t pg : pages) alloc.release(pg);
  }
}

void BM_RadixMatch(benchmark::State& state) {
  const KvNamespace ns{.model_fingerprint = "bench"};
  PageAllocator alloc(4096 * 16 + 64);
  RadixIndex index(alloc, kPage);
  const auto prompts = make_prompts(4096, 1);
  cache_all(alloc, index, ns, prompts);
  size_t i = 0;
  int64_t tokens = 0;
  for (auto _ : state) {
    MatchResult m = index.match(ns, prompts[i++ % prompts.size()]);
    benchmark::DoNotOptimize(m.matched_tokens);
    tokens += m.matched_tokens;
  }
  state.SetItemsProcessed(tokens);  // matched tokens per second
  state.counters["nodes"] = index.num_nodes();
}
BENCHMARK(BM_RadixMatch);

void BM_RadixPeek(benchmark::State& state) {
  const KvNamespace ns{.model_fingerprint = "bench"};
  PageAllocator alloc(4096 * 16 + 64);
  RadixIndex index(alloc, kPage);
  const auto prompts = make_prompts(4096, 1);
  cache_all(alloc, index, ns, prompts);
  size_t i = 0;
  int64_t tokens = 0;
  for (auto _ : state) {
    const int32_t n = index.peek(ns, prompts[i++ % prompts.size()]);
    benchmark::DoNotOptimize(n);
    tokens += n;
  }
  state.SetItemsProcessed(tokens);
}
BENCHMARK(BM_RadixPeek);

// Inserting fresh 256-token sequences (half of each shared with earlier ones), releasing them to
// the cache, and evicting LRU leaves when the pool runs low: the steady state of a busy worker.
// With tags: an evict hook is set (K/V offload), so every indexed page's tag is computed at
// insert and handed over at eviction.
void radix_insert(benchmark::State& state, bool tags) {
  const KvNamespace ns{.model_fingerprint = "bench"};
  PageAllocator alloc(32768);
  RadixIndex index(alloc, kPage);
  int64_t evicted_tags = 0;
  if (tags) {
    index.set_evict_hook([&](uint64_t, std::span<const RadixBlock>, std::span<const KvTag> t) {
      evicted_tags += static_cast<int64_t>(t.size());
    });
  }
  const auto prompts = make_prompts(8192, 2);
  size_t i = 0;
  int64_t tokens = 0;
  std::vector<int32_t> pages;
  for (auto _ : state) {
    const auto& p = prompts[i++ % prompts.size()];
    if (alloc.num_free() < 16) index.evict(1024);
    pages.clear();
    if (!alloc.allocate(16, pages).ok()) std::abort();
    auto r = index.insert(ns, p, pages);
    if (!r.ok()) std::abort();
    for (int32_t pg : pages) alloc.release(pg);
    tokens += static_cast<int64_t>(p.size());
  }
  state.SetItemsProcessed(tokens);  // inserted (offered) tokens per second
  benchmark::DoNotOptimize(evicted_tags);
}
void BM_RadixInsert(benchmark::State& state) { radix_insert(state, false); }
BENCHMARK(BM_RadixInsert);
void BM_RadixInsertWithTags(benchmark::State& state) { radix_insert(state, true); }
BENCHMARK(BM_RadixInsertWithTags);

// One routing decision over 8 workers: the routing key, a peek into each worker's index (4096
// cached sequences each) and the bounded-load choice.
void BM_RouteRequest(benchmark::State& state) {
  const KvNamespace ns{.model_fingerprint = "bench"};
  auto router = Router::create(RouterConfig{});
  std::vector<std::unique_ptr<PageAllocator>> allocs;
  std::vector<std::unique_ptr<RadixIndex>> indexes;
  std::vector<std::string> names;
  const auto prompts = make_prompts(4096, 4);
  for (int w = 0; w < 8; ++w) {
    allocs.push_back(std::make_unique<PageAllocator>(4096 * 16 / 8 + 64));
    indexes.push_back(std::make_unique<RadixIndex>(*allocs.back(), kPage));
    names.push_back("worker-" + std::to_string(w));
    if (!router->add_worker(names.back()).ok()) std::abort();
  }
  for (size_t i = 0; i < prompts.size(); ++i) {  // each worker caches an eighth of the prompts
    const std::vector<std::vector<int32_t>> one{prompts[i]};
    cache_all(*allocs[i % 8], *indexes[i % 8], ns, one);
  }
  Request r;
  r.ns = ns;
  std::vector<WorkerSnapshot> snap(8);
  size_t i = 0;
  for (auto _ : state) {
    r.prompt = prompts[i++ % prompts.size()];
    for (size_t w = 0; w < 8; ++w) {
      snap[w] = WorkerSnapshot{names[w], static_cast<int64_t>(i % 7), indexes[w]->peek(ns, r.prompt)};
    }
    auto d = router->route(router->routing_key(r), snap);
    benchmark::DoNotOptimize(d);
  }
}
BENCHMARK(BM_RouteRequest);

// N running sequences, each with a 512-token prompt, all decoding: plan one step (every
// sequence gets a decode token, a block table of 33+ pages and a slot mapping).
std::unique_ptr<Batcher> decoding_batcher(int n) {
  auto b = Batcher::create(BatcherConfig{.page_size = kPage, .num_pages = n * 128, .max_context = 4096,
                                         .max_step_tokens = 8192, .max_running = n, .max_waiting = 1 << 20, .eos_ids = {}});
  if (!b.ok()) std::abort();
  std::mt19937_64 rng(3);
  for (int i = 0; i < n; ++i) {
    Request r;
    r.id = static_cast<uint64_t>(i + 1);
    r.ns.model_fingerprint = "bench";
    r.prompt.resize(512);
    for (auto& t : r.prompt) t = static_cast<int32_t>(rng() % 32000);
    r.max_tokens = 3000;
    if (!(*b)->submit(std::move(r)).ok()) std::abort();
  }
  // Prefill everything, until a step is n single-token decodes.
  for (bool decoding = false; !decoding;) {
    auto plan = (*b)->step();
    StepResult res;
    res.step_id = plan->step_id;
    decoding = static_cast<int>(plan->seqs.size()) == n;
    for (const auto& s : plan->seqs) {
      decoding = decoding && s.tokens.size() == 1;
      if (s.sample) res.results.push_back(SeqResult{s.request_id, 7, 0.0f, {}});
    }
    if (!(*b)->apply(res).ok()) std::abort();
  }
  return std::move(b).value();
}

void BM_PlanStep(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto b = decoding_batcher(n);
  StepResult res;
  for (auto _ : state) {
    auto plan = b->step();
    state.PauseTiming();
    if (static_cast<int>(plan->seqs.size()) != n) std::abort();
    res.step_id = plan->step_id;
    res.results.clear();
    for (const auto& s : plan->seqs) res.results.push_back(SeqResult{s.request_id, 7, 0.0f, {}});
    if (!b->apply(res).ok()) std::abort();
    state.ResumeTiming();
  }
  state.counters["running"] = static_cast<double>(b->num_running());
}
BENCHMARK(BM_PlanStep)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond)->Iterations(1000);

void BM_PlanAndApplyStep(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto b = decoding_batcher(n);
  StepResult res;
  for (auto _ : state) {
    auto plan = b->step();
    res.step_id = plan->step_id;
    res.results.clear();
    for (const auto& s : plan->seqs) res.results.push_back(SeqResult{s.request_id, 7, 0.0f, {}});
    auto out = b->apply(res);
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_PlanAndApplyStep)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond)->Iterations(1000);

// K/V offload (--kv-offload): a cached prompt of N tokens (one radix leaf) is evicted page by
// page, the way a decode that needs one more page per step takes it from a full pool; every
// evicted page is planned as a spill with its tag. Timed: the whole decode of the evicting
// request (16 * (N / 16) steps, one page evicted every 16th step), not the setup.
std::unique_ptr<Batcher> offload_batcher(int32_t prompt_tokens, OffloadDirectory& dir) {
  const int32_t pages = prompt_tokens / kPage;
  auto b = Batcher::create(BatcherConfig{.page_size = kPage, .num_pages = pages + 2, .max_context = prompt_tokens + 64,
                                         .max_step_tokens = prompt_tokens + 64, .max_prefill_chunk = prompt_tokens + 64,
                                         .max_running = 4, .max_waiting = 16, .eos_ids = {}});
  if (!b.ok()) std::abort();
  (*b)->enable_offload(&dir);
  return std::move(b).value();
}

void run_to_idle(Batcher& b) {
  StepResult res;
  while (b.has_work()) {
    auto plan = b.step();
    if (!plan.ok()) std::abort();
    res.step_id = plan->step_id;
    res.results.clear();
    for (const auto& s : plan->seqs) {
      if (s.sample) res.results.push_back(SeqResult{s.request_id, 7, 0.0f, {}});
    }
    if (!b.apply(res).ok()) std::abort();
  }
}

void BM_OffloadEvictPageByPage(benchmark::State& state) {
  const auto n = static_cast<int32_t>(state.range(0));
  std::mt19937_64 rng(5);
  int64_t spilled = 0;
  for (auto _ : state) {
    state.PauseTiming();
    OffloadDirectory dir;
    auto b = offload_batcher(n, dir);
    Request a;
    a.id = 1;
    a.ns.model_fingerprint = "bench";
    a.prompt.resize(static_cast<size_t>(n) + 1);  // n / 16 full pages, all cached after one prefill
    for (auto& t : a.prompt) t = static_cast<int32_t>(rng() % 32000);
    a.max_tokens = 1;
    if (!b->submit(std::move(a)).ok()) std::abort();
    run_to_idle(*b);
    Request r;
    r.id = 2;
    r.ns.model_fingerprint = "bench";
    r.prompt.assign(kPage, 11);
    r.max_tokens = n;  // grows to n / 16 + 1 pages: evicts all but one page of the prompt, one at a time
    if (!b->submit(std::move(r)).ok()) std::abort();
    state.ResumeTiming();
    run_to_idle(*b);
    spilled += dir.stats().spilled_pages;
  }
  state.counters["spilled_pages"] = benchmark::Counter(static_cast<double>(spilled), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_OffloadEvictPageByPage)->Arg(8192)->Arg(32768)->Arg(131072)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace tessera::scheduler

BENCHMARK_MAIN();
