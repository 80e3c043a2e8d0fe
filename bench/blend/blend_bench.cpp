// CacheBlend TTFT at the engine (docs/BENCHMARKS.md "CacheBlend TTFT"): time to the first
// token's logits of RAG prompts — an anchor, k documents drawn from a pool and shuffled per
// request, a question — three ways on one CPU engine:
//   none    a full prefill of the whole prompt;
//   prefix  prefix-only caching: the longest page-aligned prefix shared with an earlier request
//           is reused (its K/V computed untimed beforehand), the rest prefilled;
//   blend   Backend::blend_prefill at --ratio with the chunk cache as earlier requests left it
//           (first uses of a document computed standalone, inside the timing).
// Median wall ms and CPU ms (process CPU time) per request; the first --warmup requests fill
// the caches and are not counted.
//   blend_bench [--model PATH | --like smollm2-135m --dtype q8_0] [--pool 8] [--k 4] [--doc 128]
//               [--question 16] [--requests 12] [--warmup 8] [--ratio 0.15] [--threads 1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tessera/model/model_synth.h"
#include "tessera/worker/engine.h"

using namespace tessera;
using namespace tessera::worker;

namespace {

double cpu_ms() { return 1000.0 * static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> a = {{"like", "smollm2-135m"}, {"dtype", "q8_0"}, {"pool", "8"},   {"k", "4"},
                                          {"doc", "128"},           {"question", "16"}, {"requests", "12"},
                                          {"warmup", "8"},          {"ratio", "0.15"},  {"threads", "1"}, {"model", ""}};
  for (int i = 1; i + 1 < argc; i += 2) a[std::string(argv[i]).substr(2)] = argv[i + 1];
  std::string path = a["model"];
  if (path.empty()) {
    path = "/tmp/blend_bench_" + a["like"] + "_" + a["dtype"] + ".gguf";
    SynthOptions o;
    o.like = a["like"];
    o.out_path = path;
    if (!parse_synth_dtype(a["dtype"], &o).ok() || !synth_model(o).ok()) {
      std::fprintf(stderr, "cannot synthesize %s\n", path.c_str());
      return 1;
    }
  }
  auto model = load_model(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.error().to_string().c_str());
    return 1;
  }
  const int pool_n = std::stoi(a["pool"]), k = std::stoi(a["k"]), doc = std::stoi(a["doc"]), q = std::stoi(a["question"]);
  const int requests = std::stoi(a["requests"]), warmup = std::stoi(a["warmup"]);
  const int32_t ps = 16;
  const int32_t n_tok = 1 + k * doc + q;
  const int32_t pages = (n_tok + ps - 1) / ps;
  auto engine = Engine::create(**model, {.pool = {.num_pages = 2 * pages, .page_size = ps}, .threads = std::stoi(a["threads"])});
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.error().to_string().c_str());
    return 1;
  }
  Engine& e = **engine;
  std::mt19937 rng(7);
  const int32_t vocab = (*model)->config().vocab_size;
  std::uniform_int_distribution<int32_t> tok(300, vocab - 1);
  std::vector<std::vector<int32_t>> docs(static_cast<size_t>(pool_n));
  for (auto& d : docs)
    for (int i = 0; i < doc; ++i) d.push_back(tok(rng));
  std::vector<int32_t> table(static_cast<size_t>(pages)), slots(0);
  for (int32_t p = 0; p < pages; ++p) table[static_cast<size_t>(p)] = p;
  std::vector<int64_t> slot(static_cast<size_t>(n_tok));
  for (int32_t i = 0; i < n_tok; ++i) slot[static_cast<size_t>(i)] = i;
  auto prefill = [&](const std::vector<int32_t>& t, int32_t from) {
    const SeqInput in{.tokens = std::span(t).subspan(static_cast<size_t>(from)), .start_pos = from, .block_table = table,
                      .slot_mapping = std::span(slot).subspan(static_cast<size_t>(from), t.size() - static_cast<size_t>(from)),
                      .want_logits = true};
    return e.forward(std::span(&in, 1)).ok();
  };
  std::set<std::vector<int32_t>> seen_pages;  // page-aligned prefixes of earlier prompts
  std::vector<double> wall[3], cpu[3];
  int64_t reused = 0, prompt = 0;
  for (int r = 0; r < warmup + requests; ++r) {
    std::vector<int> order(static_cast<size_t>(pool_n));
    for (int i = 0; i < pool_n; ++i) order[static_cast<size_t>(i)] = i;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int32_t> t{1};
    std::vector<ChunkSpan> chunks;
    for (int i = 0; i < k; ++i) {
      const auto& d = docs[static_cast<size_t>(order[static_cast<size_t>(i)])];
      chunks.push_back({.begin = static_cast<int32_t>(t.size()), .length = doc});
      t.insert(t.end(), d.begin(), d.end());
    }
    for (int i = 0; i < q; ++i) t.push_back(tok(rng));
    // none
    double w0 = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(), c0 = cpu_ms();
    if (!prefill(t, 0)) return 1;
    double w1 = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(), c1 = cpu_ms();
    if (r >= warmup) { wall[0].push_back(w1 - w0); cpu[0].push_back(c1 - c0); }
    // prefix: longest page-aligned prefix seen before (its K/V are in the pages: the full prefill above)
    int32_t matched = 0;
    for (int32_t p = 1; p * ps < n_tok; ++p) {
      if (!seen_pages.count(std::vector<int32_t>(t.begin(), t.begin() + p * ps))) break;
      matched = p * ps;
    }
    for (int32_t p = 1; p * ps < n_tok; ++p) seen_pages.insert(std::vector<int32_t>(t.begin(), t.begin() + p * ps));
    w0 = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); c0 = cpu_ms();
    if (!prefill(t, matched)) return 1;
    w1 = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); c1 = cpu_ms();
    if (r >= warmup) { wall[1].push_back(w1 - w0); cpu[1].push_back(c1 - c0); }
    // blend
    w0 = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); c0 = cpu_ms();
    auto b = e.backend().blend_prefill({.tokens = t, .chunks = chunks, .block_table = table, .recompute_ratio = std::stof(a["ratio"])});
    w1 = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); c1 = cpu_ms();
    if (!b.ok()) {
      std::fprintf(stderr, "%s\n", b.error().to_string().c_str());
      return 1;
    }
    if (r >= warmup) {
      wall[2].push_back(w1 - w0);
      cpu[2].push_back(c1 - c0);
      reused += b->hit_tokens;
      prompt += n_tok;
    }
  }
  std::printf("model %s, prompt %d tokens (BOS + %d of %d documents x %d + %d), %d requests after %d warm-up, ratio %s, %s threads\n",
              path.c_str(), n_tok, k, pool_n, doc, q, requests, warmup, a["ratio"].c_str(), a["threads"].c_str());
  const char* names[3] = {"none (full prefill)", "prefix-only caching", "CacheBlend"};
  for (int m = 0; m < 3; ++m) {
    std::printf("| %s | %.1f | %.1f | %.2fx |\n", names[m], median(wall[m]), median(cpu[m]), median(cpu[0]) / median(cpu[m]));
  }
  std::printf("blend: %lld of %lld prompt tokens from cached documents\n", static_cast<long long>(reused), static_cast<long long>(prompt));
  return 0;
}
