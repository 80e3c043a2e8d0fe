// `tessera model inspect` and `tessera model synth` run as a user runs them (the real binary).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/common/child_process.h"
#include "tessera/testing/paths.h"

namespace {

struct CliRun {
  int status;
  std::string out;
};

// `args`: words separated by single spaces (paths here have none).
CliRun run(const std::string& args) {
  std::vector<std::string> words;
  for (size_t pos = 0; pos < args.size();) {
    const size_t end = std::min(args.find(' ', pos), args.size());
    if (end > pos) words.push_back(args.substr(pos, end - pos));
    pos = end + 1;
  }
  auto r = tessera::run_to_exit({.binary = tessera::testing::bin_path("tessera"), .args = words,
                                 .stdout_to = tessera::ChildOutput::pipe(),
                                 .stderr_to = tessera::ChildOutput::same_as_stdout()});
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  if (!r.ok()) return {-1, ""};
  return {r->first.code(), r->second};
}

TEST(ModelCli, InspectJsonDescribesStories260K) {
  const CliRun r = run("model inspect --json " + tessera::testing::shared_path("models/stories260K/stories260K.gguf"));
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "gguf");
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["config"]["dim"], 64);
  EXPECT_EQ(j["config"]["n_kv_heads"], 4);
  EXPECT_EQ(j["config"]["max_seq_len"], 128);
  EXPECT_EQ(j["config"]["rope_layout"], "interleaved");
  EXPECT_EQ(j["parameter_count"], 260032 + 512 * 64);
  EXPECT_EQ(j["vocab"]["tokens"], 512);
  EXPECT_EQ(j["vocab"]["bos_id"], 1);
  EXPECT_EQ(j["fingerprint"].get<std::string>().size(), 16u);
}

TEST(ModelCli, InspectTextAndErrors) {
  const CliRun ok = run("model inspect " + tessera::testing::shared_path("models/stories260K/stories260K.bin"));
  ASSERT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("format:       llama2c"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("parameters:   260032"), std::string::npos) << ok.out;
  const CliRun missing = run("model inspect /nonexistent.gguf");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.out.find("io_error: /nonexistent.gguf: cannot open"), std::string::npos) << missing.out;
  EXPECT_EQ(run("model inspect").status, 2);
}

TEST(ModelCli, SynthWritesALoadableFile) {
  const std::string dir = tessera::testing::make_temp_dir("tessera-cli-synth");
  const CliRun r = run("model synth --like stories260k --dtype q8_0 --seed 5 --out " + dir + "/m.gguf");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("260032 parameters"), std::string::npos) << r.out;
  const CliRun i = run("model inspect --json " + dir + "/m.gguf");
  ASSERT_EQ(i.status, 0) << i.out;
  const nlohmann::json j = nlohmann::json::parse(i.out);
  EXPECT_EQ(j["config"]["hidden_dim"], 172);
  EXPECT_TRUE(j["weight_bytes"].contains("q8_0"));
  EXPECT_EQ(run("model synth --like nope --out " + dir + "/x.gguf").status, 2);
  EXPECT_EQ(run("model synth --like stories260k --dtype q3 --out " + dir + "/x.gguf").status, 2);
  std::filesystem::remove_all(dir);
}

// `model inspect --rules`: the table of each tensor's placement (text and JSON), and refusals.
TEST(ModelCli, InspectRulesPrintsEachTensorsPlacement) {
  const std::string dir = tessera::testing::make_temp_dir("tessera-cli-rules");
  const std::string rules = dir + "/rules.yaml";
  std::ofstream(rules) << "rules:\n"
                          "  - match: 'blk\\.0\\..*'\n"
                          "    kind: attention\n"
                          "    type: q8_0\n"
                          "    op: matmul_scalar\n"
                          "    thread_share: 0.5\n"
                          "  - kind: embedding\n"
                          "    type: f16\n";
  const std::string model = tessera::testing::shared_path("models/stories260K/stories260K.gguf");
  const CliRun r = run("model inspect --rules " + rules + " " + model);
  ASSERT_EQ(r.status, 0) << r.out;
  for (const std::string& line : {
           "placement:    rules " + rules + ", backend cpu (48 tensors; cpu: 1 embedding_lookup, 32 matmul, 4 "
           "matmul_scalar (thread share 0.5), 11 no op; converted at load: 1 f32->f16, 4 f32->q8_0)",
           std::string("  tensor                   kind          shape            stored type   device op               threads rule"),
           "  token_embd.weight        embedding     [512, 64]        f32    f16    cpu    embedding_lookup 1       " + rules + ":7",
           "  blk.0.attn_q.weight      attention     [64, 64]         f32    q8_0   cpu    matmul_scalar    0.5     " + rules + ":2",
           std::string("  blk.0.attn_norm.weight   norm          [64]             f32    f32    cpu    -                1       built-in llama:8"),
           std::string("  blk.4.ffn_down.weight    ffn           [64, 172]        f32    f32    cpu    matmul           1       built-in llama:6"),
           std::string("  output.weight            output        [512, 64]        f32    f32    cpu    matmul           1       built-in llama:4"),
           std::string("  blk.*.attn_q         q8_0  [64, 64]")}) {
    EXPECT_NE(r.out.find(line + "\n"), std::string::npos) << line << "\n" << r.out;
  }
  const CliRun j = run("model inspect --json --rules " + rules + " " + model);
  ASSERT_EQ(j.status, 0) << j.out;
  const nlohmann::json placement = nlohmann::json::parse(j.out)["placement"];
  ASSERT_EQ(placement.size(), 48u);
  EXPECT_EQ(placement[0], nlohmann::json::parse(R"({"tensor": "token_embd.weight", "kind": "embedding", "shape": [512, 64],
      "layer": null, "stored": "f32", "type": "f16", "device": "cpu", "op": "embedding_lookup", "thread_share": 1.0,
      "rule": ")" + rules + R"(:7"})"));
  EXPECT_EQ(placement[1]["layer"], 0);

  // Refusals: exit 1, the rule's file and line.
  std::ofstream(dir + "/bad.yaml") << "rules:\n  - kind: ffn\n    type: q8_0\n";
  const CliRun bad = run("model inspect --rules " + dir + "/bad.yaml " + model);
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("tessera model inspect: invalid_argument: " + dir + "/bad.yaml:2: type q8_0: the row length 172 "
                         "is not a multiple of q8_0's block of 32 (blk.0.ffn_down.weight)"),
            std::string::npos)
      << bad.out;
  const CliRun gpu = run("model inspect --rules " + dir + "/bad.yaml --backend cuda " + model);
  EXPECT_EQ(gpu.status, 1);
  EXPECT_NE(gpu.out.find("bad.yaml:2: type q8_0: cuda placements keep the stored type"), std::string::npos) << gpu.out;
  std::ofstream(dir + "/syntax.yaml") << "rules:\n  - kind: ffn\n    op: marlin\n";
  const CliRun syntax = run("model inspect --rules " + dir + "/syntax.yaml " + model);
  EXPECT_EQ(syntax.status, 1);
  EXPECT_NE(syntax.out.find("tessera model inspect: --rules: " + dir + "/syntax.yaml:3: op: unknown operator 'marlin'"),
            std::string::npos)
      << syntax.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
