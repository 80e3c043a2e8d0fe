// `tessera model synth --like NAME --dtype f32|f16|q8_0 --out FILE.gguf [--seed N]
//  [--vocab-from tokenizer.json]`: writes a deterministic random-weight GGUF of a real
// model's shape (see tessera/worker/model_synth.h), then loads it back as a check.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/tools/command.h"
#include "tessera/model/model.h"
#include "tessera/model/model_synth.h"

namespace tessera::tools {
namespace {

void usage(FILE* f) {
  std::fprintf(f, "usage: tessera model synth --like NAME --dtype f32|f16|q8_0 --out FILE.gguf [--seed N] "
                  "[--vocab-from tokenizer.json]\n  NAME:");
  for (const auto& s : synth_shapes()) std::fprintf(f, " %s", s.like.c_str());
  std::fprintf(f, "\n");
}

int run_synth(const std::vector<std::string>& args) {
  SynthOptions o;
  std::string dtype = "f32";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    }
    if (i + 1 >= args.size()) {
      std::fprintf(stderr, "tessera model synth: %s needs a value\n", a.c_str());
      usage(stderr);
      return 2;
    }
    const std::string& val = args[++i];
    if (a == "--like") {
      o.like = val;
    } else if (a == "--dtype") {
      dtype = val;
    } else if (a == "--out") {
      o.out_path = val;
    } else if (a == "--vocab-from") {
      o.vocab_from = val;
    } else if (a == "--seed") {
      char* end = nullptr;
      o.seed = std::strtoull(val.c_str(), &end, 10);
      if (val.empty() || *end != '\0') {
        std::fprintf(stderr, "tessera model synth: --seed must be a non-negative integer (got '%s')\n", val.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "tessera model synth: unknown option %s\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (o.like.empty() || o.out_path.empty()) {
    usage(stderr);
    return 2;
  }
  if (dtype == "f32") {
    o.dtype = DType::kF32;
  } else if (dtype == "f16") {
    o.dtype = DType::kF16;
  } else if (dtype == "q8_0") {
    o.dtype = DType::kQ8_0;
  } else {
    std::fprintf(stderr, "tessera model synth: --dtype must be f32, f16 or q8_0 (got '%s')\n", dtype.c_str());
    return 2;
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
