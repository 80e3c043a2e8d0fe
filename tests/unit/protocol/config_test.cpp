#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "tessera/common/config.h"
#include "tessera/testing/paths.h"

namespace tessera::config {
namespace {

Options make() {
  Options o("prog", "frontend");
  o.add({.name = "http-port", .type = Type::kInt, .default_value = "8000", .help = "port", .env = "TS_TEST_PORT", .min = 0, .max = 65535});
  o.add({.name = "host", .type = Type::kString, .default_value = "127.0.0.1", .help = "host"});
  o.add({.name = "ratio", .type = Type::kFloat, .default_value = "0.5", .help = "ratio", .min = 0, .max = 1});
  o.add({.name = "verbose", .type = Type::kBool, .default_value = "false", .help = "chatty"});
  o.add({.name = "mode", .type = Type::kString, .default_value = "a", .help = "mode", .choices = {"a", "b"}});
  return o;
}

TEST(Config, Defaults) {
  Options o = make();
  ASSERT_TRUE(o.parse({}).ok());
  EXPECT_EQ(o.get_int("http-port"), 8000);
  EXPECT_EQ(o.get("host"), "127.0.0.1");
  EXPECT_DOUBLE_EQ(o.get_float("ratio"), 0.5);
  EXPECT_FALSE(o.get_bool("verbose"));
  EXPECT_EQ(o.source("http-port"), "default");
}

TEST(Config, FlagsFileEnvPrecedence) {
  std::string dir = testing::make_temp_dir("cfg");
  std::string path = dir + "/t.conf";
  std::ofstream(path) << "# comment\nhost = \"10.0.0.1\"\nratio=0.25\n[scheduler]\nnot_ours = 1\n[frontend]\nhttp_port = 9000\n";
  {
    Options o = make();
    ASSERT_TRUE(o.parse({"--config", path}).ok());
    EXPECT_EQ(o.get("host"), "10.0.0.1");
    EXPECT_EQ(o.get_int("http-port"), 9000);
    EXPECT_EQ(o.source("http-port").substr(0, path.size()), path);
  }
  setenv("TS_TEST_PORT", "9100", 1);
  {
    Options o = make();
    ASSERT_TRUE(o.parse({"--config=" + path}).ok());
    EXPECT_EQ(o.get_int("http-port"), 9100);  // env beats file
    Options o2 = make();
    ASSERT_TRUE(o2.parse({"--config", path, "--http-port=9200", "--verbose", "--mode", "b"}).ok());
    EXPECT_EQ(o2.get_int("http-port"), 9200);  // flag beats env
    EXPECT_TRUE(o2.get_bool("verbose"));
    EXPECT_EQ(o2.get("mode"), "b");
  }
  unsetenv("TS_TEST_PORT");
}

TEST(Config, BadValuesNameTheOption) {
  auto err = [](std::vector<std::string> args) {
    Options o = make();
    auto s = o.parse(args);
    EXPECT_FALSE(s.ok());
    return s.ok() ? std::string() : s.error().message;
  };
  EXPECT_NE(err({"--http-port", "70000"}).find("--http-port"), std::string::npos);
  EXPECT_NE(err({"--http-port", "80x"}).find("must be an integer"), std::string::npos);
  EXPECT_NE(err({"--ratio", "2"}).find("must be in [0, 1]"), std::string::npos);
  EXPECT_NE(err({"--mode", "c"}).find("one of a|b"), std::string::npos);
  EXPECT_NE(err({"--verbose=maybe"}).find("true or false"), std::string::npos);
  EXPECT_NE(err({"--nope", "1"}).find("unknown option --nope"), std::string::npos);
  EXPECT_NE(err({"positional"}).find("unexpected argument"), std::string::npos);
  EXPECT_NE(err({"--config", "/nonexistent/x.conf"}).find("cannot open"), std::string::npos);
  std::string dir = testing::make_temp_dir("cfg");
  std::ofstream(dir + "/bad.conf") << "host = x\nbogus_key = 1\n";
  EXPECT_NE(err({"--config", dir + "/bad.conf"}).find("bad.conf:2"), std::string::npos);
}

TEST(Config, HelpListsEveryOption) {
  Options o = make();
  ASSERT_TRUE(o.parse({"--help"}).ok());
  EXPECT_TRUE(o.help_requested());
  std::string h = o.help();
  for (const char* s : {"--http-port", "TS_TEST_PORT", "8000", "--host", "--ratio", "--verbose", "--mode", "--config"})
    EXPECT_NE(h.find(s), std::string::npos) << s;
  EXPECT_NE(o.markdown_table().find("| `--http-port` | int | `8000` | `TS_TEST_PORT` |"), std::string::npos);
}

}  // namespace
}  // namespace tessera::config
