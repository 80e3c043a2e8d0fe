// CURVE between hosts: every host holds only its role's key files (three_hosts.h); a host
// without keys, or with a key set of its own, cannot join — refused at the handshake, counted
// (tessera_scheduler_refused_peers_total{socket="workers"}) and logged by the scheduler.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "multihost_fixture.h"
#include "tessera/common/child_process.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/wait.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The secrets stay where they belong: no host has another role's secret key, and host-c (only
// workers) has neither the scheduler's nor the kvstore's.
TEST_F(MultiHost, EachHostHoldsOnlyItsRolesKeys) {
  for (const std::string h : {"a", "b", "c"}) {
    std::vector<std::string> secrets;
    for (const auto& e : fs::recursive_directory_iterator(c().host_dir(h) + "/keys"))
      if (e.path().extension() == ".key_secret") secrets.push_back(e.path().filename().string());
    std::sort(secrets.begin(), secrets.end());
    if (h == "c") {
      EXPECT_EQ(secrets, (std::vector<std::string>{"worker.key_secret"})) << "host " << h;
    } else {
      EXPECT_EQ(secrets, (std::vector<std::string>{"frontend.key_secret", "kvstore.key_secret", "scheduler.key_secret",
                                                   "worker.key_secret"}))
          << "host " << h;
    }
  }
  // host-c's worker key is its own (revocable alone), not the shared one.
  EXPECT_NE(read_file(c().host_dir("c") + "/keys/worker.key_secret"), read_file(c().admin_keys() + "/worker.key_secret"));
}

// An unauthenticated host: a worker with no keys at all refuses to start; one run --insecure
// and one with a key set of its own (knowing the scheduler's public key) never register — the
// scheduler refuses both handshakes, counts and logs them, and serves as before.
TEST_F(MultiHost, UnauthenticatedHostIsRefused) {
  NetHost& rogue = c().bed().add_host("rogue", 66);
  ASSERT_TRUE(c().bed().ok()) << c().bed().error();
  const std::string model = shared_path("models/stories260K/stories260K.bin");
  const std::vector<std::string> worker = {bin_path("tessera-worker"), "--scheduler", "tcp://10.77.0.1:8101",
                                           "--model", model, "--backend", "cpu", "--threads", "1", "--num-pages", "64",
                                           "--heartbeat-ms", "100", "--metrics-port", "-1"};
  // No keys: refuses to start, saying how to make them.
  auto no_keys = rogue.exec(worker);
  ASSERT_TRUE(no_keys.ok()) << no_keys.error().to_string();
  EXPECT_NE(no_keys->first, 0);
  EXPECT_NE(no_keys->second.find("--curve-dir"), std::string::npos) << no_keys->second;

  const double refused_before =
      c().metric(kHostA, kSchedulerMetricsPort, "tessera_scheduler_refused_peers_total", "workers");
  ASSERT_EQ(refused_before, refused_before) << "no tessera_scheduler_refused_peers_total{socket=\"workers\"}";

  // Plain ZeroMQ.
  std::vector<std::string> plain(worker.begin() + 1, worker.end());
  plain.insert(plain.end(), {"--insecure", "--name", "rogue-plain"});
  Process& p1 = rogue.spawn(worker.front(), plain, c().dir() + "/logs/rogue-plain.log");
  // A key set of its own, with the scheduler's real public key (copied from any host).
  const std::string own = c().dir() + "/rogue-keys";
  auto made = run_to_exit({.binary = bin_path("tessera"), .args = {"keys", own}, .stdout_to = ChildOutput::null(),
                           .stderr_to = ChildOutput::null()});
  ASSERT_TRUE(made.ok() && made->first.shell_code() == 0);
  fs::copy_file(c().host_dir("c") + "/keys/scheduler.key", own + "/scheduler.key", fs::copy_options::overwrite_existing);
  std::vector<std::string> keyed(worker.begin() + 1, worker.end());
  keyed.insert(keyed.end(), {"--curve-dir", own, "--name", "rogue-keyed"});
  Process& p2 = rogue.spawn(worker.front(), keyed, c().dir() + "/logs/rogue-keyed.log");

  EXPECT_TRUE(wait_until(
      [&] {
        return c().metric(kHostA, kSchedulerMetricsPort, "tessera_scheduler_refused_peers_total", "workers") >=
               refused_before + 2;
      },
      milliseconds(10000)))
      << "the scheduler did not refuse both intruders\n" << c().logs();
  const std::string log = read_file(c().process("sched-a").log_path());
  // (One line per 10 s per socket: the second refusal is counted in the next line.)
  EXPECT_NE(log.find("refused a peer on workers"), std::string::npos) << log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
  // Neither registered: still the two real workers, and nothing was routed to the intruders.
  EXPECT_EQ(c().live_workers("a"), 2.0);
  const double to_rogue = c().metric(kHostA, kSchedulerMetricsPort, "tessera_scheduler_routed_requests_total", "rogue");
  EXPECT_TRUE(std::isnan(to_rogue) || to_rogue == 0.0) << to_rogue;
  rogue.forget(p1);
  rogue.forget(p2);
}

}  // namespace
}  // namespace tessera::testing
