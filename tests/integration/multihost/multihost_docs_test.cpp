// docs/deploy.md shows the commands this bed runs: each process's command line (as run, without
// the test's faster failure detection, ThreeHosts::test_flags) appears in the walkthrough, with
// the host's directory shown as /etc/tessera and the test data's model under
// /var/lib/tessera/models.
#include <fstream>
#include <sstream>

#include "multihost_fixture.h"
#include "tessera/testing/paths.h"

namespace tessera::testing {
namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
  return s;
}

TEST_F(MultiHost, DeployDocShowsTheCommandsRun) {
  std::ifstream in(source_path("docs/deploy.md"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  ASSERT_FALSE(doc.empty()) << "docs/deploy.md is missing";
  for (const std::string& name : ThreeHosts::names()) {
    std::string line;
    for (const std::string& arg : c().command(name)) {
      std::string a = arg;
      for (const std::string h : {"a", "b", "c"}) a = replace_all(a, c().host_dir(h), "/etc/tessera");
      a = replace_all(a, bin_path(""), "");
      a = replace_all(a, shared_path("models/stories260K/"), "/var/lib/tessera/models/");
      a = replace_all(a, std::string("TESSERA_KVSTORE_SECRET=") + kKvstoreSecret,
                      "TESSERA_KVSTORE_SECRET=$(cat /etc/tessera/kvstore.secret)");
      if (a == "env" && line.empty()) continue;  // the doc sets the variable in the shell
      line += (line.empty() ? "" : " ") + (a.empty() ? std::string("\"\"") : a);
    }
    EXPECT_NE(doc.find(line), std::string::npos) << "docs/deploy.md does not show the command of " << name << ":\n  " << line;
  }
}

}  // namespace
}  // namespace tessera::testing
