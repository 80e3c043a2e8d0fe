// TTFT of a request with a preference: K/V recomputed (prefill of P preference tokens + the
// prompt) vs served from the kvstore (get + decode into pages + the prompt), on a worker that
// never computed it (a second Engine). Medians over --runs.
//
//   preference_bench [--model PATH] [--like smollm2-135m] [--dtype q8_0] [--pref-tokens 200]
//                    [--prompt-tokens 16] [--runs 7] [--threads 2] [--codec int8|int4|zstd|none]
//                    [--kvstore tcp://HOST:PORT]
// Without --model a model shaped like --like is synthesized (worker/model_synth.h) into /tmp.
// Without --kvstore an in-process kvstore::Store (L1) is used; with it, a running tessera-kvstore.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/kvstore/store.h"
#include "tessera/model/model_synth.h"
#include "tessera/worker/preference.h"
#include "tessera/worker/preference_local.h"

using namespace tessera;
using namespace tessera::worker;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "preference_bench: %s\n", msg.c_str());
  std::exit(1);
}

}  // namespace

struct Args {
  std::string model;  // "" = synthesize one shaped like `like`
  std::string like = "smollm2-135m";
  std::string dtype = "q8_0";
  std::string codec = "int8";
  std::string kvstore;  // "" = an in-process kvstore::Store (L1)
  int pref_tokens = 200;
  int prompt_tokens = 16;
  int runs = 7;
  int threads = 2;
};

int main(int argc, char** argv) {
  Args args;
  config::Options table("preference_bench", "preference-bench");
  table.add(args.model, {.name = "model", .help = "model file; \"\" = synthesize one shaped like --like into /tmp"});
  table.add(args.like, {.name = "like", .help = "shape of the synthesized model (tessera model synth --like)"});
  table.add(args.dtype, {.name = "dtype", .help = "weight type of the synthesized model", .choices = {"f32", "f16", "q8_0"}});
  table.add(args.codec, {.name = "codec", .help = "codec of the preference K/V", .choices = {"none", "zstd", "int8", "int4"}});
  table.add(args.kvstore, {.name = "kvstore", .help = "a running tessera-kvstore (tcp://HOST:PORT); \"\" = in-process L1"});
  table.add(args.pref_tokens, {.name = "pref-tokens", .help = "preference tokens", .min = 1, .max = 1 << 20});
  table.add(args.prompt_tokens, {.name = "prompt-tokens", .help = "prompt tokens after the preference", .min = 1, .max = 1 << 20});
  table.add(args.runs, {.name = "runs", .help = "runs; medians are reported", .min = 1, .max = 1000});
  table.add(args.threads, {.name = "threads", .help = "compute threads", .min = 1, .max = 1024});
  table.describe("TTFT with the preference K/V fetched from the kvstore vs recomputed");
  if (auto exit_code = config::parse_command_line(table, std::vector<std::string>(argv + 1, argv + argc)))
    return *exit_code;
  std::string model_path = args.model;
  const std::string &like = args.like, &dtype = args.dtype, &codec = args.codec, &endpoint = args.kvstore;
  const int pref_tokens = args.pref_tokens, prompt_tokens = args.prompt_tokens, runs = args.runs, threads = args.threads;
  if (model_path.empty()) {
    model_path = "/tmp/preference_bench_" + like + "_" + dtype + "_" + std::to_string(getpid()) + ".gguf";
    const DType dt = dtype == "q8_0" ? DType::kQ8_0 : dtype == "f16" ? DType::kF16 : DType::kF32;
    Status st = synth_model({.like = like, .dtype = dt, .out_path = model_path, .seed = 1});
    if (!st.ok()) die("synth: " + st.error().to_string());
  }
  auto model = load_model(model_path);
  if (!model.ok()) die("load: " + model.error().to_string());
  const Model& m = **model;
  auto parsed_codec = kvstore::parse_codec(codec);
  if (!parsed_codec.ok()) die(parsed_codec.error().to_string());

  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, m.config().vocab_size - 1);
  std::vector<int32_t> pref(static_cast<size_t>(pref_tokens)), prompt(static_cast<size_t>(prompt_tokens));
  for (auto& t : pref) t = tok(rng);
  for (auto& t : prompt) t = tok(rng);

  std::unique_ptr<kvstore::Store> local;
  std::unique_ptr<PreferenceStore> store;
  if (endpoint.empty()) {
    auto s = kvstore::Store::create(kvstore::StoreConfig{});
    if (!s.ok()) die(s.error().to_string());
    local = std::move(s).value();
    store = local_store(*local);
  } else {
    auto s = connect_kvstore({.endpoint = endpoint, .timeout_ms = 10000});
    if (!s.ok()) die(s.error().to_string());
    store = std::move(s).value();
  }
  const int32_t page = 16;
  const int32_t pages = (pref_tokens + prompt_tokens + 1 + page - 1) / page + 1;
  auto make = [&]() {
    auto e = Engine::create(m, {.pool = {.num_pages = pages, .page_size = page}, .threads = threads});
    if (!e.ok()) die(e.error().to_string());
    return std::move(e).value();
  };
  auto worker_a = make(), worker_b = make(), plain = make();
  const InjectorConfig cfg{.codec = {.codec = *parsed_codec}};
  PreferenceInjector inj_a(store.get(), cfg), inj_b(store.get(), cfg), inj_nostore(nullptr, cfg);
  const uint64_t hash = preference_hash(pref, m.fingerprint);
  auto request = [&](const std::string& user, bool tokens) {
    KvFill f;
    f.blob_key = make_blob_key(user, hash);
    f.num_tokens = pref_tokens;
    f.alpha = 0.5f;
    if (tokens) f.tokens = pref;
    GenerateRequest g;
    g.prompt = prompt;
    g.max_tokens = 1;
    g.sampling.temperature = 0.0f;
    return PreferenceGenerateRequest{.fill = f, .base = g};
  };
  // Worker A computes and stores the blob once (not timed).
  inj_a.attach(*worker_a);
  auto first = generate_with_preference(*worker_a, request("bench-user", true));
  if (!first.ok()) die(first.error().to_string());
  if (!inj_a.flush(60000)) die("put did not finish");
  if (inj_a.stats().puts_done != 1) die("the blob was not stored");

  std::vector<double> ttft_compute, ttft_kv, ttft_plain, fill_compute, fill_transfer;
  int64_t blob_bytes = 0;
  std::string tier;
  inj_nostore.attach(*worker_a);
  inj_b.attach(*worker_b);
  for (int r = 0; r < runs; ++r) {
    auto c = generate_with_preference(*worker_a, request("bench-user", true));  // no store: recomputed
    if (!c.ok() || c->fill->source != "compute") die("recompute run failed");
    ttft_compute.push_back(c->gen.prefill_ms);
    fill_compute.push_back(c->fill->compute_ms);
    auto k = generate_with_preference(*worker_b, request("bench-user", false));  // worker B never computed it
    if (!k.ok()) die(k.error().to_string());
    if (k->fill->source == "compute") die("worker B computed the preference");
    ttft_kv.push_back(k->gen.prefill_ms);
    fill_transfer.push_back(k->fill->transfer_ms);
    blob_bytes = k->fill->kv_bytes;
    tier = k->fill->source;
    GenerateRequest g;
    g.prompt = prompt;
    g.max_tokens = 1;
    g.sampling.temperature = 0.0f;
    auto p = generate(*plain, g);
    if (!p.ok()) die(p.error().to_string());
    ttft_plain.push_back(p->prefill_ms);
  }
  const ModelConfig& c = m.config();
  std::printf("model %s (%d layers, %d kv heads x %d, dim %d), %s, %d threads, preference %d tokens, prompt %d tokens, %d runs\n",
              like.c_str(), c.n_layers, c.n_kv_heads, c.head_dim, c.dim, dtype.c_str(), threads, pref_tokens, prompt_tokens, runs);
  std::printf("kvstore: %s, codec %s, blob %lld bytes (f32 K+V %lld), served from %s\n",
              endpoint.empty() ? "in-process Store (L1)" : endpoint.c_str(), codec.c_str(), static_cast<long long>(blob_bytes),
              static_cast<long long>(2LL * c.n_layers * c.n_kv_heads * c.head_dim * pref_tokens * 4), tier.c_str());
  std::printf("TTFT recomputed   median %8.2f ms (preference prefill %8.2f ms)\n", median(ttft_compute), median(fill_compute));
  std::printf("TTFT from kvstore median %8.2f ms (get+decode+copy   %8.2f ms)\n", median(ttft_kv), median(fill_transfer));
  std::printf("TTFT no preference median %7.2f ms\n", median(ttft_plain));
  std::printf("speedup recomputed/kvstore: %.2fx\n", median(ttft_compute) / median(ttft_kv));
  if (model_path.rfind("/tmp/preference_bench_", 0) == 0) std::remove(model_path.c_str());
  return 0;
}
