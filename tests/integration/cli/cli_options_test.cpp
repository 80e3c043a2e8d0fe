// Every binary and `tessera` subcommand answers --version, --help and --help-markdown from its
// options table (common/config.h), rejects an unknown flag with exit status 2, and `tessera up`
// checks the options it shares with its children against the children's own declarations.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/common/child_process.h"
#include "tessera/common/version.h"
#include "tessera/testing/paths.h"

namespace tessera {
namespace {

struct Outcome {
  int status = -1;  // exit status
  std::string out;  // stdout and stderr
};

// Runs `binary args...` (arguments are plain words here: no quoting needed) to completion.
Outcome run(const std::string& binary, const std::vector<std::string>& args,
            std::vector<std::pair<std::string, std::string>> env = {}) {
  auto r = run_to_exit({.binary = testing::bin_path(binary), .args = args, .env = std::move(env),
                        .stdout_to = ChildOutput::pipe(), .stderr_to = ChildOutput::same_as_stdout()});
  if (!r.ok()) return {.status = -1, .out = r.error().to_string()};
  return {.status = r->first.code(), .out = std::move(r->second)};
}

struct Program {
  std::string binary;
  std::vector<std::string> subcommand;  // {"model", "inspect"}
  std::string name() const {
    std::string n = binary;
    for (const auto& w : subcommand) n += " " + w;
    return n;
  }
  std::vector<std::string> with(const std::string& flag) const {
    std::vector<std::string> a = subcommand;
    a.push_back(flag);
    return a;
  }
};

const std::vector<Program>& programs() {
  static const std::vector<Program> all = {
      {"tessera-frontend", {}},      {"tessera-scheduler", {}},       {"tessera-worker", {}},
      {"tessera-kvstore", {}},       {"tessera", {"up"}},             {"tessera", {"bench"}},
      {"tessera", {"generate"}},     {"tessera", {"tokenize"}},       {"tessera", {"model", "inspect"}},
      {"tessera", {"model", "synth"}}, {"engine_bench", {}},          {"kvstore_bench", {}},
      {"preference_bench", {}}};
  return all;
}

TEST(CliOptions, EveryProgramAnswersVersion) {
  for (const auto& p : programs()) {
    Outcome r = run(p.binary, p.with("--version"));
    EXPECT_EQ(r.status, 0) << p.name() << ": " << r.out;
    EXPECT_EQ(r.out, p.name() + " " + std::string(kVersion) + "\n");
  }
  Outcome r = run("tessera", {"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "tessera " + std::string(kVersion) + "\n");
}

TEST(CliOptions, EveryProgramAnswersHelpMarkdownAndHelp) {
  for (const auto& p : programs()) {
    Outcome md = run(p.binary, p.with("--help-markdown"));
    EXPECT_EQ(md.status, 0) << p.name() << ": " << md.out;
    EXPECT_EQ(md.out.rfind("## " + p.name() + "\n", 0), 0u) << md.out;
    EXPECT_NE(md.out.find("| `--log-level` | string | `info` | `TESSERA_LOG_LEVEL` |"), std::string::npos) << md.out;
    Outcome help = run(p.binary, p.with("--help"));
    EXPECT_EQ(help.status, 0) << p.name() << ": " << help.out;
    EXPECT_EQ(help.out.rfind("usage: " + p.name(), 0), 0u) << help.out;
    EXPECT_NE(help.out.find("--log-level"), std::string::npos) << help.out;
  }
}

TEST(CliOptions, UnknownFlagIsAUsageError) {
  for (const auto& p : programs()) {
    Outcome r = run(p.binary, p.with("--no-such-option"));
    EXPECT_EQ(r.status, 2) << p.name() << ": " << r.out;
    EXPECT_NE(r.out.find("unknown option --no-such-option"), std::string::npos) << r.out;
  }
}

// `tessera up` re-exports the options it shares with its children: their help text, their
// checks (and its own environment variable), not a copy of them.
TEST(CliOptions, UpSharesItsChildrensDeclarations) {
  Outcome worker = run("tessera-worker", {"--help"});
  Outcome up = run("tessera", {"up", "--help"});
  ASSERT_EQ(up.status, 0) << up.out;
  const std::string pages_help = "K/V pages in the pool (each holds page-size tokens for every layer)";
  EXPECT_NE(worker.out.find(pages_help), std::string::npos) << worker.out;
  EXPECT_NE(up.out.find(pages_help), std::string::npos) << up.out;
  EXPECT_NE(up.out.find("TESSERA_UP_NUM_PAGES"), std::string::npos) << up.out;
  Outcome bad = run("tessera", {"up", "--num-pages", "0"});
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("--num-pages"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("must be in [1, 16777216]"), std::string::npos) << bad.out;
  Outcome bad_level = run("tessera", {"up", "--log-level", "loud"});
  EXPECT_EQ(bad_level.status, 2) << bad_level.out;
}

// deploy/tessera.conf (`tessera up --config deploy/tessera.conf`) is valid for every program
// that reads it: each loads the file, then stops at a bad flag, which is applied after it.
TEST(CliOptions, DeployConfigParsesForEveryProgram) {
  const std::string conf = testing::source_path("deploy/tessera.conf");
  const std::vector<std::pair<Program, std::string>> cases = {
      {{"tessera", {"up"}}, "--workers"},      {{"tessera-scheduler", {}}, "--max-running"},
      {{"tessera-worker", {}}, "--num-pages"}, {{"tessera-frontend", {}}, "--http-threads"},
      {{"tessera-kvstore", {}}, "--threads"}};
  for (const auto& [p, flag] : cases) {
    std::vector<std::string> args = p.subcommand;
    args.insert(args.end(), {"--config", conf, flag, "0"});
    Outcome r = run(p.binary, args);
    EXPECT_EQ(r.status, 2) << p.name() << ": " << r.out;
    EXPECT_NE(r.out.find("option " + flag + " (from flag)"), std::string::npos) << p.name() << ": " << r.out;
  }
}

// An unknown TESSERA_ISA (the kernels' ISA cap, docs/operations.md) is a startup error naming the
// variable, the value and the accepted ones: exit status 2 before the model loads, not an abort.
TEST(CliOptions, UnknownIsaIsAStartupError) {
  const std::string model = testing::shared_path("models/stories260K/stories260K.gguf");
  const std::vector<std::pair<Program, std::vector<std::string>>> cases = {
      {{"tessera-worker", {}}, {"--model", model, "--backend", "cpu"}},
      {{"tessera", {"generate"}}, {"generate", "--model", model, "--prompt", "Once"}}};
  for (const auto& [p, args] : cases) {
    Outcome r = run(p.binary, args, {{"TESSERA_ISA", "avx1024"}});
    EXPECT_EQ(r.status, 2) << p.name() << ": " << r.out;
    EXPECT_NE(r.out.find(p.name() + ": TESSERA_ISA=avx1024 is not a kernel path; accepted values: scalar, avx2, avx512 (or unset)"),
              std::string::npos)
        << p.name() << ": " << r.out;
  }
  // A known value passes (the scalar path generates).
  Outcome ok = run("tessera", {"generate", "--model", model, "--prompt", "Once", "--max-tokens", "2", "--threads", "1"},
                   {{"TESSERA_ISA", "scalar"}});
  EXPECT_EQ(ok.status, 0) << ok.out;
}

}  // namespace
}  // namespace tessera
