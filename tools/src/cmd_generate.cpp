// `tessera generate`: load a model, tokenize a prompt, generate through the paged Engine and
// print the completion as it is produced (or everything as JSON with --json).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tessera/kernels/isa.h"
#include "tessera/tools/command.h"
#include "tessera/worker/engine.h"
#include "tessera/model/model.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tessera/tools/tokenizer_open.h"

namespace tessera::tools {
namespace {

constexpr const char* kUsage =
    "usage: tessera generate --model PATH --prompt TEXT [options]\n"
    "  --model PATH         GGUF file, Hugging Face directory or llama2.c checkpoint\n"
    "  --tokenizer PATH     tokenizer.bin / tokenizer.json / .gguf (default: the model's embedded\n"
    "                       vocabulary, else tokenizer.json or tokenizer.bin beside the model)\n"
    "  --prompt TEXT        the prompt (BOS is added when the vocabulary says so)\n"
    "  --max-tokens N       new tokens at most (default 128)\n"
    "  --temperature T      0 = greedy (default 0.8)\n"
    "  --top-k K            0 = off (default 40)\n"
    "  --top-p P            nucleus mass in (0, 1] (default 0.95)\n"
    "  --min-p P            keep p >= P * p_max, 0 = off (default 0.05)\n"
    "  --repeat-penalty R   CTRL-style repetition penalty over generated tokens (default 1 = off)\n"
    "  --seed S             RNG seed; same seed, same text (default 42)\n"
    "  --threads N          compute threads (default: all cores)\n"
    "  --ignore-eos         do not stop at the end-of-sequence token\n"
    "  --isa scalar|avx2|avx512   force a kernel path (default: the best this CPU runs)\n"
    "  --json               print one JSON object: text, token ids, logprobs, timings\n";

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "tessera generate: %s\n\n%s", msg.c_str(), kUsage);
  return 2;
}

struct Args {
  std::string model, tokenizer, prompt;
  int32_t max_tokens = 128;
  SamplingParams sampling;
  int32_t threads = 0;
  bool json = false;
  bool ignore_eos = false;
  std::optional<kernels::Isa> isa;
};

bool parse_number(const std::string& s, double& out) {
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size() && std::isfinite(out);
}

// Returns an empty string on success, else the error.
std::string parse(const std::vector<std::string>& args, Args& a) {
  a.sampling.temperature = 0.8f;
  a.sampling.top_k = 40;
  a.sampling.top_p = 0.95f;
  a.sampling.min_p = 0.05f;
  a.sampling.seed = 42;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& k = args[i];
    if (k == "--json") { a.json = true; continue; }
    if (k == "--ignore-eos") { a.ignore_eos = true; continue; }
    if (i + 1 >= args.size()) return "missing value after " + k;
    const std::string& v = args[++i];
    double num = 0;
    auto need_num = [&](double lo, double hi) -> std::string {
      if (!parse_number(v, num) || num < lo || num > hi) {
        return k + " must be a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got '" + v + "')";
      }
      return "";
    };
    std::string err;
    if (k == "--model") a.model = v;
    else if (k == "--tokenizer") a.tokenizer = v;
    else if (k == "--prompt") a.prompt = v;
    else if (k == "--max-tokens") { if ((err = need_num(1, 1 << 20)).empty()) a.max_tokens = static_cast<int32_t>(num); }
    else if (k == "--temperature") { if ((err = need_num(0, 100)).empty()) a.sampling.temperature = static_cast<float>(num); }
    else if (k == "--top-k") { if ((err = need_num(0, 1 << 30)).empty()) a.sampling.top_k = static_cast<int32_t>(num); }
    else if (k == "--top-p") { if ((err = need_num(1e-9, 1)).empty()) a.sampling.top_p = static_cast<float>(num); }
    else if (k == "--min-p") { if ((err = need_num(0, 1)).empty()) a.sampling.min_p = static_cast<float>(num); }
    else if (k == "--repeat-penalty") { if ((err = need_num(1e-6, 100)).empty()) a.sampling.repetition_penalty = static_cast<float>(num); }
    else if (k == "--seed") { if ((err = need_num(0, 1.8e19)).empty()) a.sampling.seed = static_cast<uint64_t>(num); }
    else if (k == "--threads") { if ((err = need_num(1, 1024)).empty()) a.threads = static_cast<int32_t>(num); }
    else if (k == "--isa") {
      a.isa = kernels::parse_isa(v);
      if (!a.isa) err = "--isa must be scalar, avx2 or avx512 (got '" + v + "')";
    } else {
      return "unknown option " + k;
    }
    if (!err.empty()) return err;
  }
  if (a.model.empty()) return "--model is required";
  if (a.prompt.empty()) return "--prompt is required";
  return "";
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
  for (const auto& s : argv) {
    if (s == "--help" || s == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
  }
  Args a;
  if (std::string err = parse(argv, a); !err.empty()) return usage_error(err);
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
                .isa = a.isa});
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
