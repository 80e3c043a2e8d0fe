// `tessera model synth --like NAME --dtype f32|f16|q8_0|q4_k|q4_k_m|... --out FILE.gguf [--seed N]
//  [--vocab-from tokenizer.json] [--chat-template-file FILE]`: writes a deterministic random-weight GGUF of a real
// model's shape (see tessera/worker/model_synth.h), then loads it back as a check.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/tools/command.h"
#include "tessera/model/model.h"
#include "tessera/model/model_synth.h"

namespace tessera::tools {
namespace {

std::vector<std::string> shape_names() {
  std::vector<std::string> out;
  for (const auto& s : synth_shapes()) out.push_back(s.like);
  return out;
}

void declare_options(config::Options& o, SynthOptions& s, std::string& template_file) {
  std::string shapes;
  for (const auto& name : shape_names()) shapes += (shapes.empty() ? "" : ", ") + name;
  o.add(s.like, {.name = "like", .help = "the real model whose shape to copy (required): " + shapes});
  o.add({.name = "dtype",
         .help = "weight type of every matrix, or a llama.cpp-style per-tensor mix (q3_k_m, q4_k_s, q4_k_m, q5_k_m)",
         .choices = synth_dtype_names()},
        dtype_name(s.dtype), [&s](const std::string& v) { (void)parse_synth_dtype(v, &s); });
  o.add(s.out_path, {.name = "out", .help = "the GGUF file to write (required)"});
  o.add(s.seed, {.name = "seed", .help = "RNG seed of the weights"});
  o.add(s.vocab_from, {.name = "vocab-from",
                       .help = "tokenizer.json (Hugging Face byte-level BPE) to embed; \"\" = a synthetic SentencePiece vocabulary"});
  o.add(template_file, {.name = "chat-template-file",
                        .help = "a Jinja chat template to embed as tokenizer.chat_template (\"\" = none)"});
}

int run_synth(const std::vector<std::string>& args) {
  SynthOptions o;
  config::Options opts("tessera model synth", "model-synth");
  std::string template_file;
  declare_options(opts, o, template_file);
  opts.describe("Write a deterministic random-weight GGUF shaped like a real model (model/model_synth.h), then load "
                "it back as a check");
  if (auto exit_code = config::parse_command_line(opts, args)) return *exit_code;
  if (o.like.empty() || o.out_path.empty()) {
    std::fprintf(stderr, "tessera model synth: --like and --out are required; see tessera model synth --help\n");
    return 2;
  }
  if (!template_file.empty()) {
    std::ifstream in(template_file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "tessera model synth: cannot read --chat-template-file %s\n", template_file.c_str());
      return 2;
    }
    o.chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string dtype = dtype_name(o.dtype);
  for (const std::string& name : synth_dtype_names()) {
    SynthOptions probe;
    if (parse_synth_dtype(name, &probe).ok() && probe.dtype == o.dtype && probe.mix == o.mix) dtype = name;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Status st = synth_model(o);
  if (!st.ok()) {
    std::fprintf(stderr, "tessera model synth: %s\n", st.error().to_string().c_str());
    return st.error().code == ErrorCode::kInvalidArgument ? 2 : 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto loaded = load_model(o.out_path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "tessera model synth: wrote %s but it does not load back: %s\n", o.out_path.c_str(),
                 loaded.error().to_string().c_str());
    return 1;
  }
  std::printf("wrote %s: %s-shaped %s, %" PRId64 " parameters, fingerprint %016" PRIx64 ", %.1f s\n",
              o.out_path.c_str(), o.like.c_str(), dtype.c_str(), (*loaded)->parameter_count(), (*loaded)->fingerprint,
              secs);
  return 0;
}

TESSERA_COMMAND("model synth", "write a deterministic random-weight GGUF shaped like a real model", run_synth);

}  // namespace
}  // namespace tessera::tools
