// The load-time weight repack (EngineOptions::weight_repack, kernels/packed_weights.h) changes
// nothing but speed: on mmap'ed GGUF files of every packable type (`model synth --like
// smollm2-135m-reduced`, tied embedding), a greedy generation with repack on and off gives the
// same tokens and bit-identical log-probabilities (Q4_K_M and Q5_K_M too, and mixtures of experts, whose
// experts are packed one by one), prefill (a batched matmul) and decode
// (GEMV) alike, and so does a second engine over the same Model after the first dropped the
// original weights' file pages.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tessera/model/model.h"
#include "tessera/worker/engine.h"

#include "synth_file.h"

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

void check_on_and_off(const std::string& like, const std::string& dtype) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("tessera_repack_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto model = synth_and_load(like, dtype, dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_NE(model, nullptr);
  const Generated on = generate_with(*model, true);
  const Generated off = generate_with(*model, false);
  const Generated on_again = generate_with(*model, true);
  ASSERT_EQ(on.tokens.size(), 40u);
  EXPECT_EQ(on.tokens, off.tokens) << dtype;
  EXPECT_EQ(on.logprobs, off.logprobs) << dtype;  // bit for bit
  EXPECT_EQ(on_again.tokens, off.tokens) << dtype;
  EXPECT_EQ(on_again.logprobs, off.logprobs) << dtype;
}

class WeightRepack : public ::testing::TestWithParam<std::string> {};

TEST_P(WeightRepack, OnAndOffGenerateIdentically) { check_on_and_off("smollm2-135m-reduced", GetParam()); }

INSTANTIATE_TEST_SUITE_P(PackableTypes, WeightRepack,
                         ::testing::Values("q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "q8_0", "q4_k_m", "q5_k_m"));

// A mixture of experts: each routed expert's matrices and the shared expert's are packed too.
TEST(WeightRepack, MoeOnAndOffGenerateIdentically) {
  check_on_and_off("qwen2-moe-a2.7b-reduced", "q4_k_m");
  check_on_and_off("mixtral-8x7b-reduced", "q4_0");
}

}  // namespace
}  // namespace tessera::worker
