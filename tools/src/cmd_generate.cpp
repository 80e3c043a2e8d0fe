// `tessera generate`: load a model, tokenize a prompt, generate through the paged Engine and
// print the completion as it is produced (or everything as JSON with --json).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/kernels/isa.h"
#include "tessera/tools/command.h"
#include "tessera/worker/engine.h"
#include "tessera/model/model.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tessera/tools/tokenizer_open.h"

namespace tessera::tools {
namespace {

// Every option's default is the member initializer here (sampling: a chat-like default rather
// than SamplingParams' neutral one).
struct Args {
  std::string model, tokenizer, prompt;
  int32_t max_tokens = 128;
  SamplingParams sampling{.temperature = 0.8f, .top_p = 0.95f, .top_k = 40, .min_p = 0.05f, .seed = 42};
  int32_t threads = 0;
  bool json = false;
  bool ignore_eos = false;
  std::optional<kernels::Isa> isa;  // nullopt = the best this CPU runs
  bool weight_repack = true;
};

void declare_options(config::Options& o, Args& a) {
  o.add(a.model, {.name = "model", .help = "GGUF file, Hugging Face directory or llama2.c checkpoint (required)"});
  o.add(a.tokenizer, {.name = "tokenizer",
                      .help = "tokenizer.bin / tokenizer.json / .gguf (\"\" = the model's embedded vocabulary, else "
                              "tokenizer.json or tokenizer.bin beside the model)"});
  o.add(a.prompt, {.name = "prompt", .help = "the prompt (BOS is added when the vocabulary says so; required)"});
  o.add(a.max_tokens, {.name = "max-tokens", .help = "new tokens at most", .min = 1, .max = 1 << 20});
  o.add(a.sampling.temperature, {.name = "temperature", .help = "0 = greedy", .min = 0, .max = 100});
  o.add(a.sampling.top_k, {.name = "top-k", .help = "0 = off", .min = 0, .max = 1 << 30});
  o.add(a.sampling.top_p, {.name = "top-p", .help = "nucleus mass in (0, 1]", .min = 1e-9, .max = 1});
  o.add(a.sampling.min_p, {.name = "min-p", .help = "keep p >= P * p_max, 0 = off", .min = 0, .max = 1});
  o.add(a.sampling.repetition_penalty,
        {.name = "repeat-penalty", .help = "CTRL-style repetition penalty over generated tokens (1 = off)", .min = 1e-6,
         .max = 100});
  o.add(a.sampling.seed, {.name = "seed", .help = "RNG seed; same seed, same text"});
  o.add(a.threads, {.name = "threads", .help = "compute threads (0 = all cores)", .min = 0, .max = 1024});
  o.add(a.ignore_eos, {.name = "ignore-eos", .help = "do not stop at the end-of-sequence token"});
  o.add({.name = "isa", .help = "force a kernel path (auto = the best this CPU runs)",
         .choices = {"auto", "scalar", "avx2", "avx512"}},
        a.isa ? kernels::isa_name(*a.isa) : "auto",
        [&a](const std::string& v) { a.isa = v == "auto" ? std::nullopt : kernels::parse_isa(v); });
  o.add({.name = "weight-repack", .help = "repack Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (AVX-512 and AVX2 kernels), Q8_0, Q4_K, Q5_K and Q6_K (AVX-512) matmul weights, MoE experts included, at load into 16-row interleaved blocks (same bytes; the mmap'ed originals' pages are dropped unless AMX reads them); off = compute from the file's layout (docs/models.md)", .choices = {"on", "off"}},
        a.weight_repack ? "on" : "off", [&a](const std::string& v) { a.weight_repack = v == "on"; });
  o.add(a.json, {.name = "json", .help = "print one JSON object: text, token ids, logprobs, timings"});
}

Result<std::unique_ptr<Tokenizer>> open_tokenizer(const Args& a, const Model& model) {
  if (!a.tokenizer.empty()) return tools::open_any_tokenizer(a.tokenizer);
  if (!model.vocab.tokens.empty()) return tokenizer_from_vocab(model.vocab);
  namespace fs = std::filesystem;
  const fs::path p(a.model);
  const fs::path dir = fs::is_directory(p) ? p : p.parent_path();
  for (const char* name : {"tokenizer.json", "tokenizer.bin"}) {
    if (fs::exists(dir / name)) return load_tokenizer((dir / name).string());
  }
  return make_error(ErrorCode::kNotFound, "no tokenizer: " + a.model +
                                              " embeds no vocabulary and there is no tokenizer.json or tokenizer.bin beside it"
                                              " (pass --tokenizer PATH)");
}

int run_generate(const std::vector<std::string>& argv) {
  Args a;
  config::Options o("tessera generate", "generate");
  declare_options(o, a);
  o.describe("Load a model, tokenize a prompt, generate through the paged CPU engine and print the completion as "
             "it is produced (or everything as JSON with --json)");
  if (auto exit_code = config::parse_command_line(o, argv)) return *exit_code;
  if (a.model.empty() || a.prompt.empty()) {
    std::fprintf(stderr, "tessera generate: --model and --prompt are required; see tessera generate --help\n");
    return 2;
  }
  if (Status isa = kernels::check_isa_env(); !isa.ok()) {
    std::fprintf(stderr, "tessera generate: %s\n", isa.error().message.c_str());
    return 2;
  }
  auto model = load_model(a.model);
  if (!model.ok()) {
    std::fprintf(stderr, "tessera generate: %s\n", model.error().to_string().c_str());
    return 1;
  }
  auto tok = open_tokenizer(a, **model);
  if (!tok.ok()) {
    std::fprintf(stderr, "tessera generate: %s\n", tok.error().to_string().c_str());
    return 1;
  }
  const std::vector<int32_t> prompt = (*tok)->encode(a.prompt, /*add_special=*/true);
  if (prompt.empty()) {
    std::fprintf(stderr, "tessera generate: the prompt encodes to no tokens\n");
    return 1;
  }
  const int32_t page_size = 16;
  const int64_t positions = static_cast<int64_t>(prompt.size()) + a.max_tokens;
  auto engine = worker::Engine::create(
      **model, {.pool = {.num_pages = static_cast<int32_t>((positions + page_size - 1) / page_size), .page_size = page_size},
                .threads = a.threads,
                .isa = a.isa,
                .weight_repack = a.weight_repack});
  if (!engine.ok()) {
    std::fprintf(stderr, "tessera generate: %s\n", engine.error().to_string().c_str());
    return 1;
  }
  worker::GenerateRequest req;
  req.prompt = prompt;
  req.max_tokens = a.max_tokens;
  req.sampling = a.sampling;
  req.sampling.logprobs = a.json;
  if (!a.ignore_eos && (*tok)->eos_id() >= 0) req.stop_ids.push_back((*tok)->eos_id());
  IncrementalDecoder decoder(**tok, /*sequence_start=*/false);
  if (!a.json) {
    req.on_token = [&](int32_t id) {
      if (!a.ignore_eos && id == (*tok)->eos_id()) return true;
      const std::string piece = decoder.push(id);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  auto out = worker::generate(**engine, req);
  if (!out.ok()) {
    std::fprintf(stderr, "\ntessera generate: %s\n", out.error().to_string().c_str());
    return 1;
  }
  const double prefill_tps = static_cast<double>(prompt.size()) / (out->prefill_ms / 1000.0);
  const size_t decoded = out->tokens.size() > 0 ? out->tokens.size() - 1 : 0;  // the first came with the prefill
  const double decode_tps = out->decode_ms > 0 ? static_cast<double>(decoded) / (out->decode_ms / 1000.0) : 0.0;
  if (!a.json) {
    const std::string tail = decoder.flush();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::printf("\n");
    std::fprintf(stderr, "prompt %zu tokens: %.1f tok/s; generated %zu tokens: %.1f tok/s (%d threads, %s)\n",
                 prompt.size(), prefill_tps, out->tokens.size(), decode_tps, (*engine)->threads(),
                 kernels::isa_name((*engine)->isa()));
    return 0;
  }
  std::vector<int32_t> text_ids;
  for (int32_t id : out->tokens) {
    if (a.ignore_eos || id != (*tok)->eos_id()) text_ids.push_back(id);
  }
  std::string text;
  IncrementalDecoder whole(**tok, /*sequence_start=*/false);
  for (int32_t id : text_ids) text += whole.push(id);
  text += whole.flush();
  nlohmann::json j;
  j["model"] = a.model;
  j["prompt"] = a.prompt;
  j["prompt_tokens"] = prompt;
  j["text"] = text;
  j["tokens"] = out->tokens;
  j["logprobs"] = out->logprobs;
  j["stopped"] = out->stopped;
  j["timings"] = {{"prefill_ms", out->prefill_ms},
                  {"decode_ms", out->decode_ms},
                  {"prefill_tokens_per_s", prefill_tps},
                  {"decode_tokens_per_s", decode_tps},
                  {"threads", (*engine)->threads()},
                  {"isa", kernels::isa_name((*engine)->isa())}};
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

TESSERA_COMMAND("generate", "generate text from a prompt (paged CPU engine)", run_generate);

}  // namespace
}  // namespace tessera::tools
