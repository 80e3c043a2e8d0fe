// Every case of ../shared/models/stories260K/greedy.json (reference greedy generations of
// llama2.c's run.c, fp32) reproduced through the paged Engine: from stories260K.bin +
// tok512.bin and from stories260K.gguf with its embedded vocabulary, on every kernel path.
// `steps` counts BOS + prompt + generated positions; we generate `steps` new tokens (at least
// as many as the reference did) and require the expected completion to be a prefix of ours.
// Generation stops at BOS or EOS as run.c does (BOS delimits TinyStories stories).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/testing/paths.h"
#include "tessera/worker/engine.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::worker {
namespace {

struct Case {
  std::string prompt;
  int32_t steps;
  std::string completion;
};

std::vector<Case> load_cases() {
  std::ifstream in(tessera::testing::shared_path("models/stories260K/greedy.json"));
  EXPECT_TRUE(in.good());
  const auto j = nlohmann::json::parse(in);
  std::vector<Case> out;
  for (const auto& c : j.at("cases")) out.push_back({c.at("prompt"), c.at("steps"), c.at("completion")});
  return out;
}

void check_all(const Model& model, const Tokenizer& tok, kernels::Isa isa, const std::string& what) {
  const auto cases = load_cases();
  ASSERT_GE(cases.size(), 4u);
  for (const Case& c : cases) {
    const std::vector<int32_t> prompt = tok.encode(c.prompt, /*add_special=*/true);
    ASSERT_FALSE(prompt.empty());
    EXPECT_EQ(prompt[0], tok.bos_id());
    auto engine = Engine::create(model, {.pool = {.num_pages = 40, .page_size = 16}, .threads = 2, .isa = isa});
    ASSERT_TRUE(engine.ok()) << engine.error().to_string();
    GenerateRequest req;
    req.prompt = prompt;
    req.max_tokens = c.steps;
    req.sampling.temperature = 0.0f;
    req.stop_ids = {tok.bos_id(), tok.eos_id()};
    auto out = generate(**engine, req);
    ASSERT_TRUE(out.ok()) << out.error().to_string();
    IncrementalDecoder dec(tok, /*sequence_start=*/false);
    std::string text;
    for (int32_t id : out->tokens) {
      if (id != tok.bos_id() && id != tok.eos_id()) text += dec.push(id);
    }
    text += dec.flush();
    EXPECT_TRUE(text.starts_with(c.completion))
        << what << " prompt='" << c.prompt << "' steps=" << c.steps << "\nexpected: " << c.completion << "\ngot:      " << text;
  }
}

std::vector<kernels::Isa> isas() {
  std::vector<kernels::Isa> out;
  for (auto i : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (kernels::isa_supported(i)) out.push_back(i);
  }
  return out;
}

TEST(Greedy, Llama2cCheckpointWithTok512) {
  auto model = load_model(tessera::testing::shared_path("models/stories260K/stories260K.bin"));
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  auto tok = load_tokenizer(tessera::testing::shared_path("models/stories260K/tok512.bin"));
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  for (kernels::Isa isa : isas()) check_all(**model, **tok, isa, std::string("stories260K.bin isa=") + kernels::isa_name(isa));
}

TEST(Greedy, GgufWithEmbeddedVocabulary) {
  auto model = load_model(tessera::testing::shared_path("models/stories260K/stories260K.gguf"));
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  ASSERT_FALSE((*model)->vocab.tokens.empty());
  auto tok = tokenizer_from_vocab((*model)->vocab);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  for (kernels::Isa isa : isas()) check_all(**model, **tok, isa, std::string("stories260K.gguf isa=") + kernels::isa_name(isa));
}

}  // namespace
}  // namespace tessera::worker
