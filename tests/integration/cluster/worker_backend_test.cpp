// tessera-worker --backend: the choice is made (and refused, with a message naming the cause)
// at start-up, before the worker registers with any scheduler. Runs the real binary.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/testing/cluster.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/paths.h"

namespace tessera::testing::cluster_test {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class WorkerBackendTest : public ::testing::Test {
 protected:
  WorkerBackendTest() : dir_(testing::make_temp_dir("tessera-worker-backend")) {}

  std::unique_ptr<Process> start(std::vector<std::string> extra, const std::string& log_name) {
    // Nothing listens on port 1: a worker that gets past start-up keeps trying to register.
    std::vector<std::string> args = {"--model", testing::shared_path("models/stories260K/stories260K.bin"),
                                     "--scheduler", "tcp://127.0.0.1:1", "--threads", "1", "--num-pages", "64"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<Process>(testing::bin_path("tessera-worker"), testing::with_keys(args), dir_ + "/" + log_name);
  }

  std::string dir_;
};

TEST_F(WorkerBackendTest, CudaWithoutAGpuFailsAtStartNamingTheCause) {
  auto w = start({"--backend", "cuda"}, "cuda.log");
  const std::string ready = w->wait_line("READY", milliseconds(20000));
  if (!ready.empty()) {
    EXPECT_NE(ready.find("backend=cuda"), std::string::npos) << ready;
    GTEST_SKIP() << "a GPU is present: --backend cuda started";
  }
  const int rc = w->wait_exit(milliseconds(10000));
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "still running";
  const std::string log = read_file(w->log_path());
#ifdef TESSERA_TEST_CUDA_WORKER
  EXPECT_NE(log.find("--backend cuda: no CUDA device (cudaGetDeviceCount"), std::string::npos) << log;
#else
  EXPECT_NE(log.find("--backend cuda: CUDA support was not compiled in"), std::string::npos) << log;
#endif
}

TEST_F(WorkerBackendTest, AutoFallsBackToCpuAndAdvertisesItsCapabilities) {
  auto w = start({"--backend", "auto", "--log-level", "info"}, "auto.log");
  const std::string ready = w->wait_line("READY", milliseconds(20000));
  ASSERT_FALSE(ready.empty()) << read_file(w->log_path());
  const std::string backend = line_field(ready, "backend");
  EXPECT_TRUE(backend == "cpu" || backend == "cuda") << ready;
  if (backend == "cpu") {
    EXPECT_TRUE(wait_until([&] { return read_file(w->log_path()).find("capabilities cpu,kv_fill,") != std::string::npos; },
                           milliseconds(5000)))
        << read_file(w->log_path());
  }
}

TEST_F(WorkerBackendTest, CudaWithKvstoreIsRefusedAtStart) {
  // Preference injection needs kv_fill, which the cuda backend lacks: a configuration error,
  // refused at start whatever the hardware (without a CUDA build, for that reason first).
  auto w = start({"--backend", "cuda", "--kvstore", "tcp://127.0.0.1:1"}, "cuda_kvstore.log");
  const int rc = w->wait_exit(milliseconds(20000));
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "still running";
  const std::string log = read_file(w->log_path());
#ifdef TESSERA_TEST_CUDA_WORKER
  EXPECT_NE(log.find("--backend cuda with --kvstore: the cuda backend lacks capability kv_fill"), std::string::npos) << log;
#else
  EXPECT_NE(log.find("--backend cuda: CUDA support was not compiled in"), std::string::npos) << log;
#endif
}

TEST_F(WorkerBackendTest, UnknownBackendIsAnOptionError) {
  auto w = start({"--backend", "tpu"}, "tpu.log");
  EXPECT_EQ(w->wait_exit(milliseconds(10000)), 2);
  EXPECT_NE(read_file(w->log_path()).find("backend"), std::string::npos) << read_file(w->log_path());
}

// --placement-rules: a rules file that cannot be parsed (exit 2) or applied to this model on this
// backend (exit 1) stops the start, naming the file and line; a good one is applied and logged.
TEST_F(WorkerBackendTest, PlacementRulesErrorsStopTheStart) {
  const std::string bad_key = dir_ + "/bad_key.yaml";
  std::ofstream(bad_key) << "rules:\n  - kind: attention\n    devcie: cpu\n";
  auto w = start({"--backend", "cpu", "--placement-rules", bad_key}, "bad_key.log");
  EXPECT_EQ(w->wait_exit(milliseconds(10000)), 2);
  EXPECT_NE(read_file(w->log_path()).find("--placement-rules: " + bad_key + ":3: unknown key 'devcie'"), std::string::npos)
      << read_file(w->log_path());

  const std::string on_cuda = dir_ + "/cuda.yaml";
  std::ofstream(on_cuda) << "rules:\n  - kind: attention\n    device: cuda\n";
  w = start({"--backend", "cpu", "--placement-rules", on_cuda}, "on_cuda.log");
  EXPECT_EQ(w->wait_exit(milliseconds(10000)), 1);
  EXPECT_NE(read_file(w->log_path()).find(on_cuda + ":2: device cuda: this worker runs the cpu backend"), std::string::npos)
      << read_file(w->log_path());

  const std::string no_match = dir_ + "/no_match.yaml";
  std::ofstream(no_match) << "rules:\n  - kind: ffn\n    type: f16\n  - kind: expert\n    type: q4_k\n";
  w = start({"--backend", "cpu", "--placement-rules", no_match}, "no_match.log");
  EXPECT_EQ(w->wait_exit(milliseconds(10000)), 1);
  EXPECT_NE(read_file(w->log_path()).find(no_match + ":4: the rule matches no tensor of this model"), std::string::npos)
      << read_file(w->log_path());
}

// A cluster whose worker converts its attention to q8_0 at load serves stories260K's greedy
// completions (the same text as the f32 weights: measured, and checked at the unit level too).
TEST(WorkerPlacement, ClusterServesWithPlacementRules) {
  const std::string dir = testing::make_temp_dir("tessera-placement");
  const std::string rules = dir + "/rules.yaml";
  std::ofstream(rules) << "rules:\n  - kind: attention\n    type: q8_0\n  - kind: embedding\n    type: f16\n";
  Cluster cluster(ClusterOptions{.worker_args = {"--placement-rules", rules, "--log-level", "info"}});
  ASSERT_TRUE(cluster.ok()) << cluster.logs();
  const GreedyCase c = greedy_cases().at(0);
  const std::string body = nlohmann::json{{"prompt", c.prompt}, {"max_tokens", c.steps},
                                          {"temperature", 0}, {"ignore_eos", true}}.dump();
  auto r = cluster.post("/v1/completions", body);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string text = nlohmann::json::parse(r->body)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text.substr(0, c.completion.size()), c.completion);
  EXPECT_TRUE(wait_until([&] { return read_file(cluster.worker().log_path()).find("placement rules " + rules) != std::string::npos; },
                         milliseconds(5000)))
      << cluster.logs();
  EXPECT_NE(read_file(cluster.worker().log_path()).find("converted at load"), std::string::npos);
}

}  // namespace
}  // namespace tessera::testing::cluster_test
