#include "worker_metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace tessera::worker_app {
namespace {

double resident_bytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) : 0.0;
}

std::vector<double> count_buckets() { return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}; }
std::vector<double> token_buckets() { return {1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192}; }
std::vector<double> step_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

}  // namespace

WorkerMetrics::WorkerMetrics(metrics::Registry& r, const WorkerMetricsInfo& info)
    : registry_(r), num_pages_(info.num_pages), marks_(static_cast<size_t>(std::max(info.num_pages, 0)), 0) {
  const metrics::Labels base = {{"worker", info.worker}, {"model", info.model}};
  auto with = [&](std::initializer_list<std::pair<std::string, std::string>> extra) {
    metrics::Labels l = base;
    l.insert(l.end(), extra.begin(), extra.end());
    return l;
  };
  r.gauge("tessera_worker_info", "1, labelled with the backend and the kernel path (ISA) this worker computes with",
          with({{"backend", info.backend}, {"kernel_isa", info.kernel_isa}}))
      .set(1);
  step_seconds_ = &r.histogram("tessera_worker_step_seconds", "time to execute one step plan (StepExecutor::execute)",
                               step_buckets(), base);
  batch_size_ = &r.histogram("tessera_worker_batch_size", "sequences computed in one step", count_buckets(), base);
  step_tokens_ = &r.histogram("tessera_worker_step_tokens", "tokens computed in one step (prefill chunks + decodes)",
                              token_buckets(), base);
  const char* steps_help = "step plans executed (ok) or refused (error: invalid, or a capability the backend lacks)";
  steps_ok_ = &r.counter("tessera_worker_steps_total", steps_help, with({{"result", "ok"}}));
  steps_error_ = &r.counter("tessera_worker_steps_total", steps_help, with({{"result", "error"}}));
  tokens_ = &r.counter("tessera_worker_tokens_total", "tokens computed, over all executed steps", base);
  const char* pages_help =
      "K/V pool pages: total = the pool; used = pages in the block tables of the requests this worker holds state for";
  r.gauge("tessera_worker_kv_pages", pages_help, with({{"state", "total"}})).set(info.num_pages);
  r.gauge("tessera_worker_kv_pool_bytes", "bytes of the K/V page pool, labelled with its page dtype (--kv-dtype)",
          with({{"dtype", info.kv_dtype}}))
      .set(static_cast<double>(info.kv_pool_bytes));
  pages_used_ = &r.gauge("tessera_worker_kv_pages", pages_help, with({{"state", "used"}}));
  rss_ = &r.gauge("tessera_worker_resident_memory_bytes", "resident set size of the worker process", base);
  registered_ = &r.gauge("tessera_worker_registered", "1 while registered with the scheduler", base);
  draining_ = &r.gauge("tessera_worker_draining", "1 while draining (no new requests; the running ones finish)", base);
  switches_ = &r.counter("tessera_worker_scheduler_switches_total",
                         "times the worker moved to another scheduler of its --scheduler list (its own died, or did not "
                         "answer register)",
                         base);
  // CacheBlend (docs/kv.md "CacheBlend"): the backend's cumulative counts, brought up to date
  // after each step (the compute thread owns the counts).
  blend_prefills_ = &r.counter("tessera_worker_blend_prefills_total",
                               "CacheBlend prefill chunks run (a prompt longer than a step's budget takes several)", base);
  const char* chunk_help = "CacheBlend document K/V lookups: hit = reused from the chunk cache, miss = computed standalone";
  blend_hits_ = &r.counter("tessera_worker_blend_chunks_total", chunk_help, with({{"result", "hit"}}));
  blend_misses_ = &r.counter("tessera_worker_blend_chunks_total", chunk_help, with({{"result", "miss"}}));
  blend_evictions_ = &r.counter("tessera_worker_blend_chunk_evictions_total", "documents evicted from the chunk cache", base);
  blend_reused_ = &r.counter("tessera_worker_blend_reused_tokens_total",
                             "prompt tokens whose K/V came from cached document K/V (chunk cache hits; usage reused_tokens)", base);
  blend_recomputed_ = &r.counter("tessera_worker_blend_recomputed_tokens_total",
                                 "reused tokens selected for recompute past the check layer", base);
  blend_chunks_ = &r.gauge("tessera_worker_blend_cache_entries", "documents in the chunk cache now", base);
  blend_bytes_ = &r.gauge("tessera_worker_blend_cache_bytes", "bytes of the chunk cache now (f32 K/V; --blend-cache-mb bounds it)", base);
}

void WorkerMetrics::on_blend(const worker::BlendStats& s) {
  auto to = [](metrics::Counter* c, int64_t v) {
    if (const double d = static_cast<double>(v) - c->value(); d > 0) c->inc(d);
  };
  to(blend_prefills_, s.prefills);
  to(blend_hits_, s.chunk_hits);
  to(blend_misses_, s.chunk_misses);
  to(blend_evictions_, s.evictions);
  to(blend_reused_, s.hit_tokens);
  to(blend_recomputed_, s.recomputed_tokens);
  blend_chunks_->set(static_cast<double>(s.cached_chunks));
  blend_bytes_->set(static_cast<double>(s.cached_bytes));
}

void WorkerMetrics::on_step(const StepPlan& plan, double seconds, bool ok) {
  if (!ok) {
    steps_error_->inc();
    return;
  }
  steps_ok_->inc();
  step_seconds_->observe(seconds);
  for (uint64_t id : plan.released) tables_.erase(id);  // applied before the batch, as the executor does
  int64_t tokens = 0;
  for (const SeqPlan& s : plan.seqs) {
    tokens += static_cast<int64_t>(s.tokens.size());
    tables_[s.request_id] = s.block_table;
  }
  batch_size_->observe(static_cast<double>(plan.seqs.size()));
  step_tokens_->observe(static_cast<double>(tokens));
  tokens_->inc(static_cast<double>(tokens));
  int64_t used = 0;
  for (const auto& [id, table] : tables_)
    for (int32_t page : table)
      if (page >= 0 && page < num_pages_ && !marks_[static_cast<size_t>(page)]) {
        marks_[static_cast<size_t>(page)] = 1;
        ++used;
      }
  for (const auto& [id, table] : tables_)
    for (int32_t page : table)
      if (page >= 0 && page < num_pages_) marks_[static_cast<size_t>(page)] = 0;
  pages_used_->set(static_cast<double>(used));
}

void WorkerMetrics::reset_requests() {
  tables_.clear();
  pages_used_->set(0);
}

std::string WorkerMetrics::render() const {
  rss_->set(resident_bytes());
  return registry_.render();
}

}  // namespace tessera::worker_app
