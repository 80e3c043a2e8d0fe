// engine_bench: llama-bench-style throughput of the paged CPU engine on one model file.
//
//   engine_bench --model FILE.gguf [--threads 2] [--prompt 512] [--gen 128] [--reps 3] [--isa avx512]
//   engine_bench --model FILE.gguf --decode-batch N [--prompt 128] [--gen 64] [--threads 2] [--reps 3]
//                [--temperature T] [--json-schema FILE [--tokenizer FILE]]
//
// pp<N>: one forward of N random token ids from position 0 (logits of the last token only),
// tokens/s = N / time; with --prefix P, from position P after P random tokens prefilled once
// (untimed): a later prefill chunk over a cached context. tg<M>: M single-token decode steps from position 0 (logits every step,
// greedy argmax), tokens/s = M / time. As llama-bench does, each test starts from an empty
// cache and uses random tokens; one untimed warm-up run of each precedes the timed ones.
// Reports the median (and min/max) over --reps runs, and the process's peak RSS.
//
// --decode-batch N (multi-sequence decode, what continuous batching runs): N sequences, each
// prefilled with its own --prompt random tokens (untimed, one forward per sequence), then --gen
// decode steps of all N together (one forward per step, one token per sequence, logits for
// every sequence, greedy argmax each). tokens/s = N * gen / time of the decode steps. Run it
// with N = 1 as well: the ratio is what batching buys. With --temperature T the decode steps go
// through Engine::execute (step plans, the worker's sampler with temperature T, seeded) instead
// (with --json-schema, every sequence is also constrained by that JSON Schema — structured
// output — with max_tokens = --gen, so the value stays open until the budget closes it; the
// vocabulary's bytes come from the model file or --tokenizer)
// of forward + argmax, so the sampler's cost is included, as in serving.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/kernels/isa.h"
#include "tessera/kernels/softmax.h"
#include "tessera/grammar/grammar.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tessera/worker/engine.h"
#include "tessera/worker/step_executor.h"

using namespace tessera;
using namespace tessera::worker;

namespace {

struct Options {
  std::string model;
  int threads = 2;
  int prompt = 512;
  int prefix = 0;  // pp test: context tokens already in the cache before the timed prompt
  int gen = 128;
  int reps = 3;
  int decode_batch = 0;  // 0: the pp/tg tests; N > 0: the multi-sequence decode test
  float temperature = -1.0f;  // >= 0: decode steps through Engine::execute with this temperature
  std::string json_schema;    // file: constrain the sampled decode steps (needs temperature >= 0)
  std::string tokenizer;      // token bytes for --json-schema when the model embeds no vocabulary
  std::optional<kernels::Isa> isa;
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
  bool mla_decompressed = false;  // latent-attention models: per-head K/V pages instead of the latent
  int mla_expand_rows = 0;        // latent cache: rows from which a sequence's step expands K/V (0 = default)
  bool weight_repack = true;
};

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Process CPU time (all threads): on a shared, oversubscribed machine wall-clock rates drop
// with the share of CPU the scheduler grants; tokens per CPU-second does not.
double cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

struct Stats {
  double median, min, max;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "engine_bench: %s\n", msg.c_str());
  return 1;
}

// The --decode-batch test; see the top of the file.
int run_decode_batch(const Options& o, const Model& model, int32_t page_size) {
  const ModelConfig& cfg = model.config();
  const int32_t n = o.decode_batch;
  const int32_t positions = o.prompt + o.gen;
  const int32_t pages_per_seq = (positions + page_size - 1) / page_size;
  auto engine = Engine::create(model, {.pool = {.num_pages = n * pages_per_seq, .page_size = page_size, .dtype = o.kv_dtype,
                                                .mla_decompressed = o.mla_decompressed},
                                       .threads = o.threads,
                                       .isa = o.isa,
                                       .weight_repack = o.weight_repack});
  if (!engine.ok()) return fail(engine.error().to_string());
  Engine& e = **engine;
  std::string grammar_text;
  int32_t eos = 2;
  if (!o.json_schema.empty()) {
    if (o.temperature < 0.0f) return fail("--json-schema needs --temperature >= 0 (the sampled path)");
    std::ifstream in(o.json_schema);
    std::stringstream ss;
    ss << in.rdbuf();
    grammar_text = ss.str();
    if (!in || grammar_text.empty()) return fail("--json-schema: cannot read " + o.json_schema);
    auto tok = model.vocab.tokens.empty() ? load_tokenizer(o.tokenizer) : tokenizer_from_vocab(model.vocab);
    if (!tok.ok()) return fail("token bytes for --json-schema: " + tok.error().to_string());
    std::vector<std::string> bytes(static_cast<size_t>(cfg.vocab_size));
    for (size_t id = 0; id < bytes.size(); ++id) {
      if (!(*tok)->is_control(static_cast<int32_t>(id))) bytes[id] = (*tok)->token_bytes(static_cast<int32_t>(id));
    }
    if ((*tok)->eos_id() >= 0) eos = (*tok)->eos_id();
    e.executor().set_grammar_vocabulary(std::make_shared<const grammar::TokenVocabulary>(bytes));
  }
  std::mt19937 rng(1234);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n));
  for (int32_t s = 0; s < n; ++s) {
    for (int32_t p = 0; p < pages_per_seq; ++p) tables[static_cast<size_t>(s)].push_back(s * pages_per_seq + p);
  }
  auto slots_for = [&](int32_t s, int32_t start, int32_t count) {
    std::vector<int64_t> out;
    for (int32_t p = start; p < start + count; ++p) {
      out.push_back(static_cast<int64_t>(tables[static_cast<size_t>(s)][static_cast<size_t>(p / page_size)]) * page_size +
                    p % page_size);
    }
    return out;
  };
  auto check = [](const Result<std::span<const float>>& r) {
    if (!r.ok()) {
      std::fprintf(stderr, "engine_bench: %s\n", r.error().to_string().c_str());
      std::exit(1);
    }
  };
  // One run: prefill every sequence (untimed), then gen decode steps of all of them (timed).
  double decode_cpu = 0.0;  // process CPU seconds of the timed decode steps, all runs
  auto run = [&]() -> double {
    std::vector<int32_t> next(static_cast<size_t>(n));
    for (int32_t s = 0; s < n; ++s) {
      std::vector<int32_t> tokens(static_cast<size_t>(o.prompt));
      for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(cfg.vocab_size));
      const auto slots = slots_for(s, 0, o.prompt);
      const SeqInput in{.tokens = tokens, .start_pos = 0, .block_table = tables[static_cast<size_t>(s)], .slot_mapping = slots,
                        .want_logits = true};
      auto r = e.forward({&in, 1});
      check(r);
      next[static_cast<size_t>(s)] = static_cast<int32_t>(kernels::argmax(r->data(), static_cast<int64_t>(r->size()), e.isa()));
    }
    std::vector<std::vector<int64_t>> slots(static_cast<size_t>(n));
    std::vector<SeqInput> batch(static_cast<size_t>(n));
    const size_t vocab = static_cast<size_t>(cfg.vocab_size);
    const double c0 = cpu_s();
    const double t0 = now_s();
    for (int32_t step = 0; step < o.gen; ++step) {
      const int32_t pos = o.prompt + step;
      for (int32_t s = 0; s < n; ++s) {
        const size_t i = static_cast<size_t>(s);
        slots[i] = slots_for(s, pos, 1);
        batch[i] = {.tokens = {&next[i], 1}, .start_pos = pos, .block_table = tables[i], .slot_mapping = slots[i],
                    .want_logits = true};
      }
      if (o.temperature >= 0.0f) {  // the serving path: a step plan, the worker's sampler
        StepPlan plan;
        plan.step_id = static_cast<uint64_t>(step);
        for (int32_t s = 0; s < n; ++s) {
          const size_t i = static_cast<size_t>(s);
          SeqPlan sp;
          sp.request_id = static_cast<uint64_t>(s + 1);
          sp.tokens = {next[i]};
          sp.start_pos = pos;
          sp.block_table = tables[i];
          sp.slot_mapping = slots[i];
          sp.sample = true;
          sp.sampling.temperature = o.temperature;
          sp.sampling.seed = static_cast<uint64_t>(s);
          if (!grammar_text.empty()) {
            sp.sampling.grammar = grammar_text;
            sp.sampling.grammar_end_tokens = {eos};
            sp.sampling.grammar_max_tokens = o.gen + 1;
          }
          plan.seqs.push_back(std::move(sp));
        }
        auto r = e.execute(plan);
        if (!r.ok()) {
          std::fprintf(stderr, "engine_bench: %s\n", r.error().to_string().c_str());
          std::exit(1);
        }
        for (size_t i = 0; i < static_cast<size_t>(n); ++i) next[i] = r->results.at(i).token;
        continue;
      }
      auto r = e.forward(batch);
      check(r);
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        const float* row = r->data() + i * vocab;
        next[i] = static_cast<int32_t>(kernels::argmax(row, static_cast<int64_t>(vocab), e.isa()));
      }
    }
    const double dt = now_s() - t0;
    decode_cpu += cpu_s() - c0;
    StepPlan release;  // forget the runs' sampler states (request ids repeat across runs)
    for (int32_t s = 0; s < n; ++s) release.released.push_back(static_cast<uint64_t>(s + 1));
    if (o.temperature >= 0.0f && !e.execute(release).ok()) std::exit(1);
    return static_cast<double>(n) * o.gen / dt;
  };
  run();  // warm-up
  decode_cpu = 0.0;
  std::vector<double> rates;
  for (int i = 0; i < o.reps; ++i) rates.push_back(run());
  const Stats st = stats(rates);
  std::printf("model: %s (dim %d, %d layers, weights %s)\n", o.model.c_str(), cfg.dim, cfg.n_layers,
              dtype_name(model.layers.at(0).wq.dtype));
  std::printf("engine: %d threads, kernels %s, %d reps, %s K/V pages (%.1f MiB, %zu bytes per token%s)\n", e.threads(),
              kernels::isa_name(e.isa()), o.reps, kernels::kv_dtype_name(e.pool().dtype()),
              static_cast<double>(e.pool().bytes()) / (1 << 20), e.pool().bytes() / static_cast<size_t>(e.pool().num_slots()),
              cfg.is_mla() ? (e.pool().planes() == 1 ? ", MLA latent" : ", MLA decompressed") : "");
  if (o.temperature >= 0.0f) std::printf("through Engine::execute, sampling at temperature %.2f\n", o.temperature);
  if (!grammar_text.empty()) std::printf("constrained by the JSON Schema in %s\n", o.json_schema.c_str());
  std::printf("decode-batch %d (prompt %d, %d steps): %10.2f tok/s  (min %.2f, max %.2f)  %.1f ms/step  %.2f tok per CPU-s\n",
              n, o.prompt, o.gen, st.median, st.min, st.max, 1e3 * n / st.median,
              static_cast<double>(n) * o.gen * o.reps / decode_cpu);
  std::printf("peak RSS %.1f MiB\n", peak_rss_mib());
  return 0;
}

void declare_options(config::Options& t, Options& o) {
  t.add(o.model, {.name = "model", .help = "model file (GGUF, llama2.c .bin, Hugging Face directory); required"});
  t.add(o.threads, {.name = "threads", .help = "compute threads", .min = 1, .max = 1024});
  t.add(o.prompt, {.name = "prompt", .help = "prompt tokens (random ids) of the prefill test", .min = 1, .max = 1 << 20});
  t.add(o.prefix, {.name = "prefix", .help = "prefill test: random tokens cached (untimed) before the timed prompt",
                   .min = 0, .max = 1 << 20});
  t.add(o.gen, {.name = "gen", .help = "generated tokens of the decode test", .min = 1, .max = 1 << 20});
  t.add(o.reps, {.name = "reps", .help = "repetitions; the median is reported", .min = 1, .max = 1000});
  t.add(o.decode_batch, {.name = "decode-batch", .help = "0 = the prefill/decode tests; N = N sequences decoding together",
                         .min = 0, .max = 1024});
  t.add(o.temperature, {.name = "temperature",
                        .help = ">= 0: decode steps go through Engine::execute and sample at this temperature; < 0 = argmax",
                        .min = -1, .max = 100});
  t.add(o.json_schema, {.name = "json-schema", .help = "JSON Schema file: constrain the sampled decode steps (structured output)"});
  t.add(o.tokenizer, {.name = "tokenizer", .help = "tokenizer file for --json-schema when the model embeds no vocabulary"});
  t.add({.name = "kv-dtype", .help = "element type of the K/V page pool (docs/kv.md)", .choices = {"f32", "f16", "int8"}},
        kernels::kv_dtype_name(o.kv_dtype), [&o](const std::string& v) { o.kv_dtype = kernels::parse_kv_dtype(v).value(); });
  t.add(o.mla_decompressed, {.name = "mla-decompressed",
                             .help = "latent-attention models (DeepSeek-V2): cache per-head K/V instead of the latent (for comparison)"});
  t.add(o.mla_expand_rows, {.name = "mla-expand-rows",
                            .help = "latent cache: rows of one sequence in a step from which attention runs on per-head K/V "
                                    "expanded from the latent (0 = the engine's default; a large value = always absorbed)",
                            .min = 0, .max = 1 << 30});
  t.add({.name = "weight-repack", .help = "repack Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (AVX-512 and AVX2 kernels), Q8_0, Q4_K, Q5_K and Q6_K (AVX-512) matmul weights, MoE experts included, at load into 16-row interleaved blocks (same bytes; the mmap'ed originals' pages are dropped unless AMX reads them); off = compute from the file's layout (docs/models.md)", .choices = {"on", "off"}},
        o.weight_repack ? "on" : "off", [&o](const std::string& v) { o.weight_repack = v == "on"; });
  t.add({.name = "isa", .help = "force a kernel path (auto = the best this CPU runs)",
         .choices = {"auto", "scalar", "avx2", "avx512"}},
        o.isa ? kernels::isa_name(*o.isa) : "auto",
        [&o](const std::string& v) { o.isa = v == "auto" ? std::nullopt : kernels::parse_isa(v); });
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  config::Options options("engine_bench", "engine-bench");
  declare_options(options, o);
  options.describe("Engine throughput: prefill and decode tokens/s (median of --reps), peak RSS");
  if (auto exit_code = config::parse_command_line(options, std::vector<std::string>(argv + 1, argv + argc)))
    return *exit_code;
  if (o.model.empty()) return fail("--model is required; see engine_bench --help");
  const double t_load = now_s();
  auto model = load_model(o.model);
  if (!model.ok()) return fail(model.error().to_string());
  const double load_s = now_s() - t_load;
  const ModelConfig& cfg = (*model)->config();
  const int32_t page_size = 16;
  if (o.decode_batch > 0) return run_decode_batch(o, **model, page_size);
  const int32_t positions = std::max(o.prefix + o.prompt, o.gen);
  auto engine = Engine::create(**model, {.pool = {.num_pages = (positions + page_size - 1) / page_size, .page_size = page_size,
                                                  .dtype = o.kv_dtype, .mla_decompressed = o.mla_decompressed},
                                         .threads = o.threads,
                                         .isa = o.isa,
                                         .mla_expand_rows = o.mla_expand_rows,
                                         .weight_repack = o.weight_repack});
  if (!engine.ok()) return fail(engine.error().to_string());
  Engine& e = **engine;

  std::mt19937 rng(1234);
  std::vector<int32_t> table((positions + page_size - 1) / page_size);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  auto slots_for = [&](int32_t start, int32_t n) {
    std::vector<int64_t> s;
    for (int32_t p = start; p < start + n; ++p) s.push_back(static_cast<int64_t>(table[static_cast<size_t>(p / page_size)]) * page_size + p % page_size);
    return s;
  };

  if (o.prefix > 0) {  // the cached context of the prefill test (the decode test reuses its first slots)
    std::vector<int32_t> tokens(static_cast<size_t>(o.prefix));
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(cfg.vocab_size));
    const auto slots = slots_for(0, o.prefix);
    const SeqInput in{.tokens = tokens, .start_pos = 0, .block_table = table, .slot_mapping = slots, .want_logits = true};
    if (auto r = e.forward({&in, 1}); !r.ok()) return fail(r.error().to_string());
  }
  auto run_pp = [&]() -> double {
    std::vector<int32_t> tokens(static_cast<size_t>(o.prompt));
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(cfg.vocab_size));
    const auto slots = slots_for(o.prefix, o.prompt);
    const SeqInput in{.tokens = tokens, .start_pos = o.prefix, .block_table = table, .slot_mapping = slots, .want_logits = true};
    const double t0 = now_s();
    auto r = e.forward({&in, 1});
    const double dt = now_s() - t0;
    if (!r.ok()) {
      std::fprintf(stderr, "engine_bench: %s\n", r.error().to_string().c_str());
      std::exit(1);
    }
    return o.prompt / dt;
  };
  auto run_tg = [&]() -> double {
    int32_t tok = static_cast<int32_t>(rng() % static_cast<uint32_t>(cfg.vocab_size));
    const double t0 = now_s();
    for (int32_t p = 0; p < o.gen; ++p) {
      const auto slots = slots_for(p, 1);
      const SeqInput in{.tokens = {&tok, 1}, .start_pos = p, .block_table = table, .slot_mapping = slots, .want_logits = true};
      auto r = e.forward({&in, 1});
      if (!r.ok()) {
        std::fprintf(stderr, "engine_bench: %s\n", r.error().to_string().c_str());
        std::exit(1);
      }
      tok = static_cast<int32_t>(kernels::argmax(r->data(), static_cast<int64_t>(r->size()), e.isa()));
    }
    return o.gen / (now_s() - t0);
  };

  run_pp();  // warm-up: page in the weights, grow the scratch buffers
  run_tg();
  std::vector<double> pp, tg;
  double c0 = cpu_s();
  for (int i = 0; i < o.reps; ++i) pp.push_back(run_pp());
  const double pp_cpu = cpu_s() - c0;
  c0 = cpu_s();
  for (int i = 0; i < o.reps; ++i) tg.push_back(run_tg());
  const double tg_cpu = cpu_s() - c0;
  const Stats sp = stats(pp), st = stats(tg);
  std::printf("model: %s (%s, dim %d, %d layers, %d/%d heads, vocab %d, weights %s), load %.2f s\n", o.model.c_str(),
              cfg.architecture.c_str(), cfg.dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size,
              dtype_name((*model)->layers.at(0).wq.dtype), load_s);
  std::printf("engine: %d threads, kernels %s, %d reps, %s K/V pages (%.1f MiB, %zu bytes per token%s)\n", e.threads(),
              kernels::isa_name(e.isa()), o.reps, kernels::kv_dtype_name(e.pool().dtype()),
              static_cast<double>(e.pool().bytes()) / (1 << 20), e.pool().bytes() / static_cast<size_t>(e.pool().num_slots()),
              cfg.is_mla() ? (e.pool().planes() == 1 ? ", MLA latent" : ", MLA decompressed") : "");
  if (o.prefix > 0) std::printf("prefill after %d cached tokens\n", o.prefix);
  std::printf("pp%-4d %10.2f tok/s  (min %.2f, max %.2f)  %.2f tok per CPU-s\n", o.prompt, sp.median, sp.min, sp.max,
              o.prompt * o.reps / pp_cpu);
  std::printf("tg%-4d %10.2f tok/s  (min %.2f, max %.2f)  %.2f tok per CPU-s\n", o.gen, st.median, st.min, st.max,
              o.gen * o.reps / tg_cpu);
  std::printf("peak RSS %.1f MiB\n", peak_rss_mib());
  return 0;
}
