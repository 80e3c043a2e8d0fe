#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "tessera/common/config.h"
#include "tessera/testing/paths.h"

namespace tessera::config {
namespace {

// The defaults live in the struct's member initializers; the table reads them from there.
struct TestConfig {
  int http_port = 8000;
  std::string host = "127.0.0.1";
  double ratio = 0.5;
  bool verbose = false;
  std::string mode = "a";
};

// Options keep references into the struct they are bound to: both live in one object.
struct Table {
  TestConfig c;
  Options o{"prog", "frontend"};
  Table() {
    o.add(c.http_port, {.name = "http-port", .help = "port", .env = "TS_TEST_PORT", .min = 0, .max = 65535});
    o.add(c.host, {.name = "host", .help = "host"});
    o.add(c.ratio, {.name = "ratio", .help = "ratio", .min = 0, .max = 1});
    o.add(c.verbose, {.name = "verbose", .help = "chatty"});
    o.add(c.mode, {.name = "mode", .help = "mode", .choices = {"a", "b"}});
  }
};

TEST(Config, Defaults) {
  Table t;
  Options& o = t.o;
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
    Table t;
    Options& o = t.o;
    ASSERT_TRUE(o.parse({"--config", path}).ok());
    EXPECT_EQ(o.get("host"), "10.0.0.1");
    EXPECT_EQ(o.get_int("http-port"), 9000);
    EXPECT_EQ(o.source("http-port").substr(0, path.size()), path);
  }
  setenv("TS_TEST_PORT", "9100", 1);
  {
    Table t;
    Options& o = t.o;
    ASSERT_TRUE(o.parse({"--config=" + path}).ok());
    EXPECT_EQ(o.get_int("http-port"), 9100);  // env beats file
    Table t2;
    Options& o2 = t2.o;
    ASSERT_TRUE(o2.parse({"--config", path, "--http-port=9200", "--verbose", "--mode", "b"}).ok());
    EXPECT_EQ(o2.get_int("http-port"), 9200);  // flag beats env
    EXPECT_TRUE(o2.get_bool("verbose"));
    EXPECT_EQ(o2.get("mode"), "b");
  }
  unsetenv("TS_TEST_PORT");
}

TEST(Config, BadValuesNameTheOption) {
  auto err = [](std::vector<std::string> args) {
    Table t;
    auto s = t.o.parse(args);
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
  Table t;
  Options& o = t.o;
  ASSERT_TRUE(o.parse({"--help"}).ok());
  EXPECT_TRUE(o.help_requested());
  std::string h = o.help();
  for (const char* s : {"--http-port", "TS_TEST_PORT", "8000", "--host", "--ratio", "--verbose", "--mode", "--config"})
    EXPECT_NE(h.find(s), std::string::npos) << s;
  EXPECT_NE(o.markdown_table().find("| `--http-port` | int | `8000` | `TS_TEST_PORT` |"), std::string::npos);
}

TEST(Config, DefaultsComeFromTheBoundMembersAndValuesGoBack) {
  struct Cfg {
    int32_t pages = 1024;
    uint32_t ttl = 7;
    float temperature = 0.8f;
    std::vector<std::string> schedulers = {"tcp://a:1", "tcp://b:2"};
    std::string codec = "int8";
  } c;
  Options o("prog", "worker");
  o.add(c.pages, {.name = "num-pages", .help = "pages", .min = 1});
  o.add(c.ttl, {.name = "ttl", .help = "ttl"});
  o.add(c.temperature, {.name = "temperature", .help = "t"});
  o.add(c.schedulers, {.name = "schedulers", .help = "list"});
  int codec_id = 3;
  o.add({.name = "codec", .help = "custom", .choices = {"int4", "int8"}}, c.codec,
        [&](const std::string& v) { codec_id = v == "int4" ? 4 : 8; });
  const std::string table = o.markdown_table();
  EXPECT_NE(table.find("| `--num-pages` | int | `1024` |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `--temperature` | float | `0.8` |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `--schedulers` | string | `tcp://a:1,tcp://b:2` |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `--log-level` | string | `info` | `TESSERA_LOG_LEVEL` |"), std::string::npos) << table;
  ASSERT_TRUE(o.parse({"--num-pages", "8", "--temperature=0.25", "--schedulers", "tcp://c:3", "--codec", "int4"}).ok());
  EXPECT_EQ(c.pages, 8);
  EXPECT_FLOAT_EQ(c.temperature, 0.25f);
  EXPECT_EQ(c.schedulers, std::vector<std::string>{"tcp://c:3"});
  EXPECT_EQ(codec_id, 4);
  EXPECT_EQ(c.ttl, 7u);
  Options o2("prog", "worker");
  uint32_t ttl = 7;
  o2.add(ttl, {.name = "ttl", .help = "ttl"});
  auto st = o2.parse({"--ttl", "-1"});  // the C++ type's range is checked too
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("must be in [0, 4294967295]"), std::string::npos) << st.error().message;
}

TEST(Config, PositionalBuiltinsAndBareBooleans) {
  std::string path;
  bool json = false;
  Options o("tessera model inspect", "inspect");
  o.add(path, {.name = "path", .help = "model"});
  o.add(json, {.name = "json", .help = "as JSON"});
  o.positional("path");
  ASSERT_TRUE(o.parse({"--json", "model.gguf"}).ok());  // a bare bool does not swallow the path
  EXPECT_TRUE(json);
  EXPECT_EQ(path, "model.gguf");
  EXPECT_EQ(o.source("path"), "flag");
  Options o2("tessera model inspect", "inspect");
  o2.add(path, {.name = "path", .help = "model"});
  o2.positional("path");
  EXPECT_FALSE(o2.parse({"a", "b"}).ok());  // one positional at most
  Options o3("prog", "x");
  ASSERT_TRUE(o3.parse({"--version", "--help-markdown"}).ok());
  EXPECT_TRUE(o3.version_requested());
  EXPECT_TRUE(o3.help_markdown_requested());
  EXPECT_FALSE(o3.help_requested());
  EXPECT_NE(o3.markdown().find("## prog"), std::string::npos);
  EXPECT_NE(o3.help().find("--log-level"), std::string::npos);
}

TEST(Config, ConfigFileIsReported) {
  std::string dir = testing::make_temp_dir("cfg");
  std::ofstream(dir + "/c.conf") << "[other]\nx = 1\n";
  Options o("prog", "frontend");
  ASSERT_TRUE(o.parse({"--config", dir + "/c.conf", "--log-level", "warn"}).ok());
  EXPECT_EQ(o.config_file(), dir + "/c.conf");
  EXPECT_EQ(o.common().log_level, "warn");
}

}  // namespace
}  // namespace tessera::config
