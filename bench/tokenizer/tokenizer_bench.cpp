// Tokenizer throughput: encode a ~100k-character prompt and decode it back, for the three
// real vocabularies. Reports bytes/s of input text (encode) or output text (decode).
//   build*/bin/tokenizer_bench [--benchmark_filter=Encode]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "tessera/tokenizer/tokenizer.h"

namespace {

using tessera::Tokenizer;

const Tokenizer& tokenizer(const std::string& relative) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[relative];
  if (!slot) {
    const char* env = std::getenv("TESSERA_SHARED_DIR");
    const std::string path = std::string(env != nullptr ? env : TESSERA_SHARED_DIR) + "/" + relative;
    auto t = tessera::load_tokenizer(path);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.error().to_string().c_str());
      std::exit(1);
    }
    slot = std::move(t).value();
  }
  return *slot;
}

// ~100k characters of mixed English prose, code, numbers and some non-ASCII text.
const std::string& prompt() {
  static const std::string text = [] {
    const std::string chunk =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
        "def f(x):\n    return x**2 + 12345\n"
        "Caf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 3.14159 don't won't I'm\n";
    std::string s;
    while (s.size() < 100000) s += chunk;
    return s;
  }();
  return text;
}

void Encode(benchmark::State& state, const char* file) {
  const Tokenizer& t = tokenizer(file);
  size_t n = 0;
  for (auto _ : state) {
    auto ids = t.encode(prompt(), true);
    n = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * prompt().size()));
  state.counters["tokens"] = static_cast<double>(n);
}

void Decode(benchmark::State& state, const char* file) {
  const Tokenizer& t = tokenizer(file);
  const auto ids = t.encode(prompt(), true);
  for (auto _ : state) {
    std::string s = t.decode(ids);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * prompt().size()));
}

BENCHMARK_CAPTURE(Encode, tok512, "models/stories260K/tok512.bin")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Encode, llama2, "tokenizers/llama2/tokenizer.bin")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Encode, smollm2, "tokenizers/smollm2/tokenizer.json")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Decode, llama2, "tokenizers/llama2/tokenizer.bin")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Decode, smollm2, "tokenizers/smollm2/tokenizer.json")->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
