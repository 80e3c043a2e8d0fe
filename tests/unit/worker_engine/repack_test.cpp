// The load-time weight repack (EngineOptions::weight_repack, kernels/packed_weights.h) changes
// nothing but speed: on mmap'ed GGUF files of every packable type (`model synth --like
// smollm2-135m-reduced`, tied embedding), a greedy generation with repack on and off gives the
// same tokens and bit-identical log-probabilities, prefill (a batched matmul) and decode
// (GEMV) alike, and so does a second engine over the same Model after the first dropped the
// original weights' file pages.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tessera/model/model.h"
#include "tessera/model/model_synth.h"
#include "tessera/worker/engine.h"

namespace tessera::worker {
namespace {

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

Generated generate_with(const Model& model, bool repack) {
  auto engine = Engine::create(model, {.pool = {.num_pages = 8, .page_size = 16}, .threads = 2, .weight_repack = repack});
  EXPECT_TRUE(engine.ok()) << engine.error().to_string();
  if (!engine.ok()) return {};
  const std::vector<int32_t> prompt = {1, 17, 250, 3, 99, 41, 7, 300, 12};
  GenerateRequest req;
  req.prompt = prompt;
  req.max_tokens = 40;
  req.sampling.temperature = 0.0f;
  req.sampling.logprobs = true;
  auto out = generate(**engine, req);
  EXPECT_TRUE(out.ok()) << out.error().to_string();
  if (!out.ok()) return {};
  return {out->tokens, out->logprobs};
}

class WeightRepack : public ::testing::TestWithParam<std::string> {};

TEST_P(WeightRepack, OnAndOffGenerateIdentically) {
  const std::string dtype = GetParam();
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tessera_repack_" + dtype + "_" + std::to_string(::getpid()) + ".gguf")).string();
  SynthOptions o;
  o.like = "smollm2-135m-reduced";
  o.out_path = path;
  ASSERT_TRUE(parse_synth_dtype(dtype, &o).ok()) << dtype;
  const Status st = synth_model(o);
  ASSERT_TRUE(st.ok()) << st.error().to_string();
  auto model = load_model(path);
  std::filesystem::remove(path);  // mmapped: readable until the model is gone
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  const Generated on = generate_with(**model, true);
  const Generated off = generate_with(**model, false);
  const Generated on_again = generate_with(**model, true);
  ASSERT_EQ(on.tokens.size(), 40u);
  EXPECT_EQ(on.tokens, off.tokens) << dtype;
  EXPECT_EQ(on.logprobs, off.logprobs) << dtype;  // bit for bit
  EXPECT_EQ(on_again.tokens, off.tokens) << dtype;
  EXPECT_EQ(on_again.logprobs, off.logprobs) << dtype;
}

INSTANTIATE_TEST_SUITE_P(PackableTypes, WeightRepack, ::testing::Values("q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"));

}  // namespace
}  // namespace tessera::worker
