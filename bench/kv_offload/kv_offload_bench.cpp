// TTFT of a request whose long prefix was evicted: recomputed (prefill of prefix + suffix) vs
// reloaded from the kvstore (a KvReload of the prefix pages, then the suffix prefill), on a
// worker that never computed it (a second Engine), through the StepExecutor exactly as the worker
// runs plans. Also the TTFT with the prefix still in the pool (suffix only). Medians over --runs,
// wall clock and the process's CPU time.
//
//   kv_offload_bench [--model PATH] [--like smollm2-135m] [--dtype q8_0] [--prefix-tokens 512]
//                    [--suffix-tokens 16] [--runs 7] [--threads 1] [--codec int8] [--blob-dtype f16]
//                    [--kvstore tcp://HOST:PORT]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/common/kv_digest.h"
#include "tessera/kvstore/store.h"
#include "tessera/model/model_synth.h"
#include "tessera/worker/kv_offload.h"
#include "tessera/worker/preference_local.h"

using namespace tessera;
using namespace tessera::worker;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "kv_offload_bench: %s\n", msg.c_str());
  std::exit(1);
}

double cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr int32_t kPage = 16;

StepPlan prefill(uint64_t step, const std::vector<int32_t>& tokens, int32_t start, int32_t end, bool sample) {
  SeqPlan s;
  s.request_id = 1;
  s.start_pos = start;
  s.tokens.assign(tokens.begin() + start, tokens.begin() + end);
  for (int32_t p = 0; p < (end + kPage - 1) / kPage; ++p) s.block_table.push_back(p);
  for (int32_t pos = start; pos < end; ++pos) s.slot_mapping.push_back(pos);
  s.sample = sample;
  s.sampling.temperature = 0.0f;
  StepPlan p;
  p.step_id = step;
  p.seqs.push_back(std::move(s));
  p.released = {1};  // a fresh request each time
  return p;
}

// --per-page-gets: the store without its one-round-trip get_many (PreferenceStore's default:
// get() per page), i.e. how reloads fetched pages before `get_many`.
class PerPageStore final : public PreferenceStore {
 public:
  explicit PerPageStore(PreferenceStore* inner) : inner_(inner) {}
  Result<StoreGet> get(const kvstore::BlobKey& key) override { return inner_->get(key); }
  Status put(const kvstore::BlobKey& key, std::string blob) override { return inner_->put(key, std::move(blob)); }

 private:
  PreferenceStore* inner_;
};

}  // namespace

struct Args {
  std::string model, like = "smollm2-135m", dtype = "q8_0", codec = "int8", blob_dtype = "f16", kvstore;
  int prefix_tokens = 512, suffix_tokens = 16, runs = 7, threads = 1;
  bool per_page_gets = false;
};

int main(int argc, char** argv) {
  Args a;
  config::Options t("kv_offload_bench", "kv-offload-bench");
  t.add(a.model, {.name = "model", .help = "model file; \"\" = synthesize one shaped like --like into /tmp"});
  t.add(a.like, {.name = "like", .help = "shape of the synthesized model (tessera model synth --like)"});
  t.add(a.dtype, {.name = "dtype", .help = "weight type of the synthesized model", .choices = {"f32", "f16", "q8_0"}});
  t.add(a.codec, {.name = "codec", .help = "codec of the spilled pages (any kvstore codec name)"});
  t.add(a.blob_dtype, {.name = "blob-dtype", .help = "element type pages are stored from", .choices = {"f16", "f32"}});
  t.add(a.kvstore, {.name = "kvstore", .help = "a running tessera-kvstore (tcp://HOST:PORT); \"\" = in-process L1"});
  t.add(a.per_page_gets, {.name = "per-page-gets",
                          .help = "reload with one kvstore get per page instead of get_many (the earlier behaviour)"});
  t.add(a.prefix_tokens, {.name = "prefix-tokens", .help = "evicted prefix (a multiple of 16)", .min = 16, .max = 1 << 20});
  t.add(a.suffix_tokens, {.name = "suffix-tokens", .help = "tokens after the prefix", .min = 1, .max = 1 << 20});
  t.add(a.runs, {.name = "runs", .help = "runs; medians are reported", .min = 1, .max = 1000});
  t.add(a.threads, {.name = "threads", .help = "compute threads", .min = 1, .max = 1024});
  t.describe("TTFT with an evicted prefix reloaded from the kvstore vs recomputed");
  if (auto code = config::parse_command_line(t, std::vector<std::string>(argv + 1, argv + argc))) return *code;
  if (a.prefix_tokens % kPage != 0) die("--prefix-tokens must be a multiple of 16");
  std::string path = a.model;
  if (path.empty()) {
    path = "/tmp/kv_offload_bench_" + a.like + "_" + a.dtype + "_" + std::to_string(getpid()) + ".gguf";
    const DType dt = a.dtype == "q8_0" ? DType::kQ8_0 : a.dtype == "f16" ? DType::kF16 : DType::kF32;
    if (Status st = synth_model({.like = a.like, .dtype = dt, .out_path = path, .seed = 1}); !st.ok()) die(st.error().to_string());
  }
  auto model = load_model(path);
  if (!model.ok()) die(model.error().to_string());
  const Model& m = **model;
  auto codec = kvstore::parse_codec(a.codec);
  if (!codec.ok()) die(codec.error().to_string());

  std::unique_ptr<kvstore::Store> local;
  std::unique_ptr<PreferenceStore> store;
  if (a.kvstore.empty()) {
    auto s = kvstore::Store::create(kvstore::StoreConfig{});
    if (!s.ok()) die(s.error().to_string());
    local = std::move(s).value();
    store = local_store(*local);
  } else {
    auto s = connect_kvstore({.endpoint = a.kvstore, .timeout_ms = 10000});
    if (!s.ok()) die(s.error().to_string());
    store = std::move(s).value();
  }
  std::unique_ptr<PreferenceStore> inner;
  if (a.per_page_gets) {
    inner = std::move(store);
    store = std::make_unique<PerPageStore>(inner.get());
  }
  const int32_t n_prefix_pages = a.prefix_tokens / kPage;
  const int32_t total = a.prefix_tokens + a.suffix_tokens;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, m.config().vocab_size - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(total));
  for (auto& x : tokens) x = tok(rng);
  auto make = [&] {
    auto e = Engine::create(m, {.pool = {.num_pages = (total + kPage - 1) / kPage + 1, .page_size = kPage}, .threads = a.threads});
    if (!e.ok()) die(e.error().to_string());
    return std::move(e).value();
  };
  OffloadOptions oo;
  oo.codec.codec = *codec;
  oo.blob_dtype = a.blob_dtype == "f32" ? DType::kF32 : DType::kF16;
  KvOffloader off(store.get(), oo);
  auto worker_a = make(), worker_b = make();
  worker_a->executor().set_offload_handler(&off);
  worker_b->executor().set_offload_handler(&off);
  // Worker A computes the prefix and spills its pages (not timed).
  uint64_t step = 1;
  if (auto r = worker_a->executor().execute(prefill(step++, tokens, 0, a.prefix_tokens, false)); !r.ok()) die(r.error().to_string());
  StepPlan spill;
  spill.step_id = step++;
  std::vector<uint64_t> hashes;
  std::vector<KvTag> tags;  // the pages' prefix tags, as the scheduler computes them
  KvPrefixDigest digest("bench");
  for (int32_t i = 0; i < n_prefix_pages; ++i) {
    hashes.push_back(0x1000 + static_cast<uint64_t>(i));
    digest.add_page(std::span(tokens).subspan(static_cast<size_t>(i * kPage), static_cast<size_t>(kPage)));
    tags.push_back(digest.tag());
    spill.spills.push_back(KvSpill{.page = i, .hash = hashes.back(), .ns_hash = 42, .tag = tags.back()});
  }
  if (auto r = worker_a->executor().execute(spill); !r.ok()) die(r.error().to_string());
  if (!off.flush(120000) || off.stats().offloaded_pages != static_cast<uint64_t>(n_prefix_pages)) die("spills were not stored");
  const OffloadWorkerStats put = off.stats();

  std::vector<double> t_recompute, c_recompute, t_reload, c_reload, t_load, t_cached, c_cached;
  for (int r = 0; r < a.runs; ++r) {
    // Recompute: the whole prompt on worker B.
    double w0 = now_ms(), c0 = cpu_ms();
    if (auto x = worker_b->executor().execute(prefill(step++, tokens, 0, total, true)); !x.ok()) die(x.error().to_string());
    t_recompute.push_back(now_ms() - w0);
    c_recompute.push_back(cpu_ms() - c0);
    // Cached: the prefix is in B's pool now; only the suffix.
    w0 = now_ms(), c0 = cpu_ms();
    if (auto x = worker_b->executor().execute(prefill(step++, tokens, a.prefix_tokens, total, true)); !x.ok()) die(x.error().to_string());
    t_cached.push_back(now_ms() - w0);
    c_cached.push_back(cpu_ms() - c0);
    // Reload: the prefix pages from the kvstore, then the suffix (two plans, as the scheduler sends them).
    w0 = now_ms(), c0 = cpu_ms();
    StepPlan reload;
    reload.step_id = step++;
    KvReload kr{.request_id = 1, .ns_hash = 42, .pages = {}, .hashes = hashes, .tags = tags};
    for (int32_t i = 0; i < n_prefix_pages; ++i) kr.pages.push_back(i);
    reload.reloads.push_back(kr);
    auto x = worker_b->executor().execute(reload);
    if (!x.ok() || x->reloads.at(0).pages != n_prefix_pages) die("reload failed");
    const double load_ms = now_ms() - w0;
    if (auto y = worker_b->executor().execute(prefill(step++, tokens, a.prefix_tokens, total, true)); !y.ok()) die(y.error().to_string());
    t_reload.push_back(now_ms() - w0);
    c_reload.push_back(cpu_ms() - c0);
    t_load.push_back(load_ms);
  }
  const ModelConfig& c = m.config();
  std::printf("model %s (%d layers, %d kv heads x %d), %s, %d threads, prefix %d tokens (%d pages), suffix %d, %d runs\n",
              a.like.c_str(), c.n_layers, c.n_kv_heads, c.head_dim, a.dtype.c_str(), a.threads, a.prefix_tokens, n_prefix_pages,
              a.suffix_tokens, a.runs);
  std::printf("kvstore %s, codec %s from %s: %llu bytes for the prefix (%.2fx smaller than %s)\n",
              a.kvstore.empty() ? "in-process Store (L1)" : a.kvstore.c_str(), a.codec.c_str(), a.blob_dtype.c_str(),
              static_cast<unsigned long long>(put.offloaded_bytes),
              static_cast<double>(put.offloaded_raw_bytes) / static_cast<double>(put.offloaded_bytes), a.blob_dtype.c_str());
  std::printf("TTFT recomputed     median %9.2f ms  (cpu %9.2f ms)\n", median(t_recompute), median(c_recompute));
  std::printf("TTFT reloaded       median %9.2f ms  (cpu %9.2f ms; reload step %.2f ms)\n", median(t_reload), median(c_reload),
              median(t_load));
  std::printf("TTFT prefix in pool median %9.2f ms  (cpu %9.2f ms)\n", median(t_cached), median(c_cached));
  std::printf("speedup recomputed/reloaded: %.2fx wall, %.2fx cpu\n", median(t_recompute) / median(t_reload),
              median(c_recompute) / median(c_reload));
  if (path.rfind("/tmp/kv_offload_bench_", 0) == 0) std::remove(path.c_str());
  return 0;
}
