// Placement applied at load (LoadOptions::placer): conversions give the same tensors and the
// same greedy tokens as converting offline; per-tensor kernel paths and thread shares run; the
// llama2.c and GGUF stories260K files load under rules (canonical names).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tessera/model/model.h"
#include "tessera/model/model_synth.h"
#include "tessera/placement/placement.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/status.h"
#include "tessera/worker/engine.h"

namespace tessera::placement {
namespace {

Target cpu() { return {.backend = "cpu", .why = "test"}; }

Result<std::unique_ptr<Model>> load_with(const std::string& path, const std::string& yaml,
                                         std::vector<Decision>* report = nullptr) {
  TS_ASSIGN_OR_RETURN(RuleSet rules, parse_rules(yaml, "r.yaml"));
  LoadOptions o;
  o.placer = make_placer(std::make_shared<const RuleSet>(std::move(rules)), cpu(), report);
  return load_model(path, o);
}

std::vector<int32_t> greedy(const Model& m, int32_t n, int32_t threads = 2) {
  auto engine = worker::Engine::create(m, {.pool = {.num_pages = 16, .page_size = 16}, .threads = threads});
  EXPECT_TRUE(engine.ok()) << engine.error().to_string();
  if (!engine.ok()) return {};
  const std::vector<int32_t> prompt = {1, 300, 41, 877, 512, 66, 903, 250};
  std::vector<int32_t> p;
  for (int32_t t : prompt) p.push_back(t % m.config().vocab_size);
  worker::GenerateRequest req{.prompt = p, .max_tokens = n};
  req.sampling.temperature = 0.0f;
  auto r = worker::generate(**engine, req);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return r.ok() ? r->tokens : std::vector<int32_t>{};
}

// Converting every matrix of an f32 file at load equals `model synth` writing that type: the
// same bytes (fingerprints sample every tensor) and the same 32 greedy tokens.
TEST(PlacementLoad, ConversionAtLoadEqualsOfflineConversion) {
  const std::string dir = testing::make_temp_dir("placement");
  auto synth = [&](DType t) {
    const std::string out = dir + "/llama-" + dtype_name(t) + ".gguf";
    Status st = synth_model(SynthOptions{.like = "llama3.2-1b-reduced", .dtype = t, .out_path = out, .seed = 3});
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    return out;
  };
  const std::string f32 = synth(DType::kF32);
  for (DType t : {DType::kQ8_0, DType::kQ4_K, DType::kF16, DType::kQ6_K}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<Decision> report;
    auto at_load = load_with(f32, std::string("rules:\n  - kind: [embedding, output, attention, ffn]\n    type: ") +
                                      dtype_name(t) + "\n", &report);
    ASSERT_TRUE(at_load.ok()) << at_load.error().to_string();
    auto offline = load_model(synth(t));
    ASSERT_TRUE(offline.ok()) << offline.error().to_string();
    EXPECT_EQ((*at_load)->layers[1].w_down.dtype, t);
    EXPECT_EQ((*at_load)->tok_embeddings.dtype, t);
    EXPECT_EQ((*at_load)->fingerprint, (*offline)->fingerprint);
    int converted = 0;
    for (const Decision& d : report) converted += d.to != d.from;
    EXPECT_EQ(converted, 1 + 2 * 7);  // token_embd (tied head), 2 layers x 7 matrices
    EXPECT_EQ(greedy(**at_load, 32), greedy(**offline, 32));
  }
}

// A per-tensor kernel path and thread share: integer-dot kernels give the same sums on every
// path and any row split, so the tokens equal the default placement's.
TEST(PlacementLoad, KernelPathAndThreadShareRun) {
  const std::string gguf = testing::shared_path("models/stories260K/stories260K.gguf");
  auto base = load_with(gguf, "rules:\n  - kind: attention\n    type: q8_0\n");
  ASSERT_TRUE(base.ok()) << base.error().to_string();
  auto forced = load_with(gguf,
                          "rules:\n"
                          "  - kind: attention\n"
                          "    layers: 0-2\n"
                          "    type: q8_0\n"
                          "    op: matmul_scalar\n"
                          "    thread_share: 0.5\n"
                          "  - kind: attention\n"
                          "    type: q8_0\n"
                          "    thread_share: 0.25\n");
  ASSERT_TRUE(forced.ok()) << forced.error().to_string();
  EXPECT_EQ((*forced)->layers[0].wq.exec.path, MatmulPath::kScalar);
  EXPECT_EQ((*forced)->layers[0].wq.exec.thread_share, 0.5f);
  EXPECT_EQ((*forced)->layers[4].wo.exec.path, MatmulPath::kBackend);
  EXPECT_EQ((*forced)->layers[4].wo.exec.thread_share, 0.25f);
  EXPECT_EQ((*base)->fingerprint, (*forced)->fingerprint);  // same bytes; execution choices are not weights
  const std::vector<int32_t> want = greedy(**base, 40, 4);
  ASSERT_EQ(want.size(), 40u);
  EXPECT_EQ(greedy(**forced, 40, 4), want);
}

// stories260K's attention in q8_0 (converted at load) against the f32 file: the trained model's
// greedy tokens are unchanged over 40 tokens (measured; this is the stated tolerance).
TEST(PlacementLoad, Q8AttentionKeepsStoriesGreedyTokens) {
  const std::string gguf = testing::shared_path("models/stories260K/stories260K.gguf");
  auto plain = load_model(gguf);
  ASSERT_TRUE(plain.ok()) << plain.error().to_string();
  auto q8 = load_with(gguf, "rules:\n  - kind: attention\n    type: q8_0\n");
  ASSERT_TRUE(q8.ok()) << q8.error().to_string();
  EXPECT_NE((*plain)->fingerprint, (*q8)->fingerprint);
  EXPECT_EQ(greedy(**q8, 40), greedy(**plain, 40));
}

// The llama2.c checkpoint's tensors get the same canonical names, so the same rules apply.
TEST(PlacementLoad, Llama2cCheckpointUnderRules) {
  const std::string bin = testing::shared_path("models/stories260K/stories260K.bin");
  std::vector<Decision> report;
  auto m = load_with(bin, "rules:\n  - match: 'blk\\.[0-4]\\.attn_(q|k|v)\\.weight'\n    type: f16\n", &report);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ((*m)->layers[4].wk.dtype, DType::kF16);
  EXPECT_EQ((*m)->layers[4].wo.dtype, DType::kF32);
  EXPECT_EQ(report.front().tensor, "token_embd.weight");
  // An impossible conversion fails the load, naming the rule.
  auto bad = load_with(bin, "rules:\n  - kind: ffn\n    type: q8_0\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "r.yaml:2: type q8_0: the row length 172 is not a multiple of q8_0's block of 32 (blk.0.ffn_down.weight)");
}

}  // namespace
}  // namespace tessera::placement
