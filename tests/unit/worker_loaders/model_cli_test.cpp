// `tessera model inspect` and `tessera model synth` run as a user runs them (the real binary).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
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

}  // namespace
