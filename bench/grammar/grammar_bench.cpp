// grammar_bench: the cost of one structured-output token mask (TokenVocabulary::allowed_tokens)
// over a real vocabulary, along random generations constrained by a JSON Schema.
//
//   grammar_bench --vocab FILE [--schema FILE] [--walks 50] [--max-tokens 128]
//
// --vocab: a tokenizer file (tokenizer.bin, tokenizer.json) or a GGUF model (its vocabulary).
// Each walk samples uniformly among the allowed tokens until the value is complete (budget
// --max-tokens); every mask is timed. Prints the median, p90, p99 and max per mask, split by
// whether the text was inside a JSON string (the widest masks) or not.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/grammar/grammar.h"
#include "tessera/model/model.h"
#include "tessera/tokenizer/tokenizer.h"

using namespace tessera;

namespace {

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string vocab_path, schema_path;
  int32_t walks = 50, max_tokens = 128;
  config::Options o("grammar_bench", "grammar-bench");
  o.add(vocab_path, {.name = "vocab", .help = "tokenizer file or GGUF model whose vocabulary to use; required"});
  o.add(schema_path, {.name = "schema", .help = "JSON Schema file (\"\" = any JSON object)"});
  o.add(walks, {.name = "walks", .help = "random constrained generations", .min = 1, .max = 100000});
  o.add(max_tokens, {.name = "max-tokens", .help = "token budget of each generation", .min = 1, .max = 100000});
  o.describe("Cost of one structured-output token mask over a real vocabulary");
  if (auto code = config::parse_command_line(o, std::vector<std::string>(argv + 1, argv + argc))) return *code;
  Result<std::unique_ptr<Tokenizer>> tok = make_error(ErrorCode::kInvalidArgument, "--vocab is required");
  if (vocab_path.size() > 5 && vocab_path.substr(vocab_path.size() - 5) == ".gguf") {
    auto v = read_model_vocab(vocab_path);
    if (!v.ok()) return std::fprintf(stderr, "%s\n", v.error().to_string().c_str()), 1;
    tok = tokenizer_from_vocab(*v);
  } else if (!vocab_path.empty()) {
    tok = load_tokenizer(vocab_path);
  }
  if (!tok.ok()) return std::fprintf(stderr, "grammar_bench: %s\n", tok.error().to_string().c_str()), 1;
  std::vector<std::string> bytes(static_cast<size_t>((*tok)->vocab_size()));
  for (size_t id = 0; id < bytes.size(); ++id) {
    if (!(*tok)->is_control(static_cast<int32_t>(id))) bytes[id] = (*tok)->token_bytes(static_cast<int32_t>(id));
  }
  const auto t0 = std::chrono::steady_clock::now();
  grammar::TokenVocabulary tv(bytes);
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::string schema_text(grammar::kJsonObjectSchema);
  if (!schema_path.empty()) {
    std::ifstream in(schema_path);
    std::stringstream ss;
    ss << in.rdbuf();
    schema_text = ss.str();
  }
  auto schema = grammar::compile_json_schema(schema_text);
  if (!schema.ok()) return std::fprintf(stderr, "grammar_bench: %s\n", schema.error().message.c_str()), 1;
  const int32_t end = (*tok)->eos_id() >= 0 ? (*tok)->eos_id() : 0;
  std::mt19937 rng(1);
  std::vector<double> in_string, structural;
  std::vector<int32_t> allowed;
  size_t allowed_total = 0;
  for (int32_t w = 0; w < walks; ++w) {
    grammar::Matcher m(*schema);
    std::string text;
    for (int32_t used = 0; used < max_tokens; ++used) {
      const auto a = std::chrono::steady_clock::now();
      tv.allowed_tokens(m, max_tokens - used, {&end, 1}, &allowed);
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
      const bool inside = std::count(text.begin(), text.end(), '"') % 2 == 1;
      (inside ? in_string : structural).push_back(us);
      allowed_total += allowed.size();
      if (allowed.empty()) break;
      const int32_t t = allowed[rng() % allowed.size()];
      if (t == end) break;
      m.feed(tv.bytes(t));
      text += tv.bytes(t);
    }
  }
  const size_t masks = in_string.size() + structural.size();
  std::printf("vocabulary: %s (%zu tokens), trie built in %.1f ms\n", vocab_path.c_str(), bytes.size(), build_ms);
  std::printf("schema: %s; %d walks, %zu masks, %.0f allowed tokens per mask on average\n",
              schema_path.empty() ? "json_object" : schema_path.c_str(), walks, masks,
              static_cast<double>(allowed_total) / static_cast<double>(std::max<size_t>(masks, 1)));
  for (const auto& [name, v] : {std::pair{"inside a string", &in_string}, std::pair{"structural", &structural}}) {
    std::printf("  %-16s %6zu masks: median %8.1f us  p90 %8.1f  p99 %8.1f  max %8.1f\n", name, v->size(), pct(*v, 0.5),
                pct(*v, 0.9), pct(*v, 0.99), pct(*v, 1.0));
  }
  std::vector<double> all = in_string;
  all.insert(all.end(), structural.begin(), structural.end());
  std::printf("  %-16s %6zu masks: median %8.1f us  mean %8.1f\n", "all", all.size(), pct(all, 0.5),
              all.empty() ? 0.0 : [&] { double s = 0; for (double x : all) s += x; return s / static_cast<double>(all.size()); }());
  return 0;
}
