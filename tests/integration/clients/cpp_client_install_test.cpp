// The installed packages: `cmake --install` of the client component into a temporary prefix,
// then clients/cpp/examples/example.cpp built against it twice — with find_package(TesseraClient)
// (CMake, the static library) and with pkg-config (tessera-client.pc, the shared library) — and
// both programs run against a real `tessera up` cluster. Then the server component: programs,
// docs, systemd units (paths rewritten for the prefix) and the example config.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tessera/common/child_process.h"
#include "tessera/testing/paths.h"
#include "up_cluster.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

// Runs `command` with /bin/sh; returns (exit code, stdout + stderr).
std::pair<int, std::string> sh(const std::string& command) {
  auto r = run_to_exit(SpawnOptions{.binary = "/bin/sh", .args = {"-c", command}, .env = {},
                                    .stdout_to = ChildOutput::pipe(), .stderr_to = ChildOutput::same_as_stdout()});
  if (!r.ok()) return {-1, r.error().to_string()};
  return {r->first.shell_code(), r->second};
}

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

class InstallTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("tessera-install"); }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(InstallTest, ClientPackageBuildsAndRunsTheExample) {
  const fs::path prefix = dir_ / "prefix";
  auto [rc, out] = sh(std::string(TESSERA_CMAKE) + " --install " + q(TESSERA_BUILD_DIR) + " --prefix " + q(prefix) +
                      " --component client");
  ASSERT_EQ(rc, 0) << out;
  for (const char* f : {"include/tessera/client/client.h", "include/tessera/client/types.h",
                        "include/tessera/client/errors.h", "include/tessera/client/version.h",
                        "lib/libtessera_client.a", "lib/libtessera_client.so", "lib/pkgconfig/tessera-client.pc",
                        "lib/cmake/TesseraClient/TesseraClientConfig.cmake",
                        "lib/cmake/TesseraClient/TesseraClientConfigVersion.cmake",
                        "lib/cmake/TesseraClient/TesseraClientTargets.cmake"})
    EXPECT_TRUE(fs::exists(prefix / f)) << f << " not installed\n" << out;
  for (const auto& h : fs::directory_iterator(prefix / "include/tessera/client")) {  // pimpl: no wire types
    const std::string text = read(h.path());
    EXPECT_EQ(text.find("msgpack"), std::string::npos) << h.path();
    EXPECT_EQ(text.find("zmq"), std::string::npos) << h.path();
  }

  // find_package(TesseraClient), static library.
  const std::string examples = source_path("clients/cpp/examples");
  std::tie(rc, out) = sh(std::string(TESSERA_CMAKE) + " -S " + q(examples) + " -B " + q(dir_ / "cmake-build") +
                         " -DCMAKE_PREFIX_PATH=" + q(prefix) + " -DCMAKE_CXX_COMPILER=" + TESSERA_CXX +
                         " -G Ninja -DTESSERA_CLIENT_STATIC=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS='" +
                         TESSERA_EXAMPLE_FLAGS + "' -DCMAKE_EXE_LINKER_FLAGS='" + TESSERA_EXAMPLE_FLAGS + "' && " + TESSERA_CMAKE + " --build " +
                         q(dir_ / "cmake-build"));
  ASSERT_EQ(rc, 0) << out;
  const fs::path cmake_example = dir_ / "cmake-build" / "example";
  ASSERT_TRUE(fs::exists(cmake_example)) << out;

  // pkg-config, shared library.
  const fs::path pc_example = dir_ / "pc-example";
  std::tie(rc, out) = sh("PKG_CONFIG_PATH=" + q(prefix / "lib/pkgconfig") + " && export PKG_CONFIG_PATH && " +
                         TESSERA_CXX + " -std=c++20 -O1 " + TESSERA_EXAMPLE_FLAGS + " -o " + q(pc_example) + " " + q(examples + "/example.cpp") +
                         " $(pkg-config --cflags --libs tessera-client) -Wl,-rpath," +
                         (prefix / "lib").string());
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = sh("ldd " + q(pc_example));
  EXPECT_NE(out.find("libtessera_client.so.0"), std::string::npos) << out;
  std::tie(rc, out) = sh("ldd " + q(cmake_example));
  EXPECT_EQ(out.find("libtessera_client"), std::string::npos) << "the static build loads the shared library\n" << out;

  UpCluster cluster(/*second_frontend=*/false);
  ASSERT_TRUE(cluster.ok());
  for (const fs::path& program : {cmake_example, pc_example}) {
    SCOPED_TRACE(program.string());
    std::tie(rc, out) = sh(q(program) + " " + cluster.zmq_endpoint());
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("model stories260K"), std::string::npos) << out;
    EXPECT_NE(out.find("refused: 103 out_of_range"), std::string::npos) << out;
    EXPECT_NE(out.find("deadline: 203 deadline_exceeded"), std::string::npos) << out;
    EXPECT_TRUE(out.find("[cancelled, ") != std::string::npos || out.find("[length, ") != std::string::npos ||
                out.find("[stop, ") != std::string::npos) << out;
  }
}

TEST_F(InstallTest, ServerComponentInstallsProgramsDocsUnitsAndConfig) {
  const fs::path prefix = dir_ / "server";
  auto [rc, out] = sh(std::string(TESSERA_CMAKE) + " --install " + q(TESSERA_BUILD_DIR) + " --prefix " + q(prefix) +
                      " --component server");
  ASSERT_EQ(rc, 0) << out;
  for (const char* p : {"tessera", "tessera-frontend", "tessera-scheduler", "tessera-worker", "tessera-kvstore"}) {
    const fs::path bin = prefix / "bin" / p;
    ASSERT_TRUE(fs::exists(bin)) << p;
    EXPECT_NE(fs::status(bin).permissions() & fs::perms::owner_exec, fs::perms::none) << p;
  }
  std::tie(rc, out) = sh(q(prefix / "bin/tessera-scheduler") + " --version");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(fs::exists(prefix / "etc/tessera/tessera.conf"));
  EXPECT_TRUE(fs::exists(prefix / "share/doc/tessera/protocol.md"));
  EXPECT_TRUE(fs::exists(prefix / "share/doc/tessera/README.md"));
  const std::string unit = read(prefix / "lib/systemd/system/tessera-scheduler.service");
  EXPECT_NE(unit.find("ExecStart=" + (prefix / "bin/tessera-scheduler").string()), std::string::npos) << unit;
  EXPECT_NE(unit.find((prefix / "etc/tessera/tessera.conf").string()), std::string::npos) << unit;
  EXPECT_EQ(unit.find("/usr/local/bin"), std::string::npos) << unit;
  EXPECT_TRUE(fs::exists(prefix / "lib/systemd/system/tessera-worker@.service"));
  // find_package(Tessera): the installed programs as imported executables.
  const fs::path project = dir_ / "find-tessera";
  fs::create_directories(project);
  {
    std::ofstream cm(project / "CMakeLists.txt");
    cm << "cmake_minimum_required(VERSION 3.20)\nproject(uses_tessera NONE)\nfind_package(Tessera 0.1 REQUIRED)\n"
          "get_target_property(loc Tessera::scheduler IMPORTED_LOCATION)\nmessage(STATUS \"SCHEDULER=${loc}\")\n"
          "message(STATUS \"BIN_DIR=${Tessera_BIN_DIR}\")\n";
  }
  std::tie(rc, out) = sh(std::string(TESSERA_CMAKE) + " -S " + q(project) + " -B " + q(project / "build") +
                         " -DCMAKE_PREFIX_PATH=" + q(prefix));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("SCHEDULER=" + (prefix / "bin/tessera-scheduler").string()), std::string::npos) << out;
  EXPECT_NE(out.find("BIN_DIR=" + (prefix / "bin").string()), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::testing
