// A cluster of sim workers (tessera-worker --backend sim, docs/simulation.md): real scheduler,
// frontend and worker processes over CURVE, no weights computed. Every answer must be the
// deterministic tokens of its prompt (which the sim backend computes through the K/V pages the
// scheduler assigned, so shared prefixes, copy-on-write and eviction are exercised for real),
// repeated system prompts must come from the prefix cache, and the load must spread over the
// workers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/client/client.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/wait.h"
#include "tessera/worker/sim_backend.h"

namespace tessera::testing {
namespace {

constexpr int kWorkers = 8;
constexpr int kGroups = 6;          // system prompts
constexpr int kRequests = 96;       // 16 users per system prompt
constexpr int kSystemTokens = 80;   // 5 pages of 16
constexpr int kMaxTokens = 12;
constexpr int32_t kVocab = 512;     // stories260K
constexpr int32_t kEos = 2;         // llama2.c

std::vector<int32_t> prompt_of(int i) {
  const int g = i % kGroups;
  std::vector<int32_t> p;
  for (int k = 0; k < kSystemTokens; ++k) p.push_back(3 + (g * 131 + k * 7) % 500);
  for (int k = 0; k < 5 + i % 7; ++k) p.push_back(3 + (i * 37 + k * 11) % 500);  // the user's question
  return p;
}

TEST(ClusterSim, AnswersAreTheDeterministicTokensAndLoadSpreads) {
  // Steps at half the H100 profile's time (a decode step ~2.3 ms): slow enough that the 96
  // requests are all in flight together, so the scheduler's load bound (not only prefix
  // affinity) decides where they go.
  Cluster c({.num_pages = 256,
             .num_workers = kWorkers,
             .worker_args = {"--backend", "sim", "--sim-profile", "h100-llama2-7b", "--sim-time-scale", "2"}});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(wait_until([&] { return c.metric(c.metrics_port(), "tessera_scheduler_live_workers") == kWorkers; },
                         milliseconds(20000)))
      << c.logs();

  tessera::client::Client client(c.zmq_endpoint());
  // Warm each system prompt once (one request per group, sequentially), then everything at once.
  for (int g = 0; g < kGroups; ++g) {
    const auto done = client.complete(prompt_of(g), {.max_tokens = kMaxTokens, .temperature = 0.0});
    EXPECT_EQ(done.tokens, worker::sim_expected_tokens(prompt_of(g), kMaxTokens, kVocab, kEos)) << "warm-up " << g;
  }
  std::vector<tessera::client::Stream> streams;
  for (int i = kGroups; i < kGroups + kRequests; ++i) {
    // Half greedy, half sampled at temperature 1: the sim worker's answer is the same.
    const double temperature = i % 2 == 0 ? 0.0 : 1.0;
    streams.push_back(client.stream_complete(
        prompt_of(i), {.max_tokens = kMaxTokens, .temperature = temperature, .seed = static_cast<uint64_t>(i)}));
  }
  int wrong = 0;
  int64_t cached = 0, prompt_tokens = 0;
  for (size_t k = 0; k < streams.size(); ++k) {
    const int i = kGroups + static_cast<int>(k);
    const tessera::client::Completion done = streams[k].result();
    const std::vector<int32_t> want = worker::sim_expected_tokens(prompt_of(i), kMaxTokens, kVocab, kEos);
    if (done.tokens != want) ++wrong;
    EXPECT_EQ(done.finish_reason, "length") << "request " << i;
    EXPECT_EQ(done.usage.prompt_tokens, static_cast<int32_t>(prompt_of(i).size()));
    cached += done.usage.cached_tokens;
    prompt_tokens += done.usage.prompt_tokens;
  }
  EXPECT_EQ(wrong, 0) << "answers that are not the sim backend's deterministic tokens, of " << kRequests << "\n"
                      << c.logs();
  // The prefix cache is used: requests that arrive together on a worker that has not cached
  // their system prompt yet compute it in the same step, so not every repeat is a hit (3680 of
  // 7680 system-prompt tokens in the first runs); a third is the floor.
  EXPECT_GE(cached, int64_t{kRequests} * kSystemTokens / 3)
      << cached << " of " << prompt_tokens << " prompt tokens cached";

  // Load: requests routed per worker (the scheduler's bounded-load rule, eps 0.25 by default).
  std::vector<double> routed;
  // A worker that was never routed to has no series (NaN): once /metrics answers, that is 0.
  ASSERT_TRUE(wait_until([&] { return !std::isnan(c.metric(c.metrics_port(), "tessera_scheduler_live_workers")); },
                         milliseconds(20000)));
  for (int w = 0; w < kWorkers; ++w) {
    const double v = c.metric(c.metrics_port(), "tessera_scheduler_routed_requests_total",
                              "worker=\"w" + std::to_string(w) + "\"");
    routed.push_back(std::isnan(v) ? 0.0 : v);
  }
  double total = 0, most = 0;
  for (double r : routed) {
    EXPECT_GE(r, 1.0) << "a worker got no request";
    total += r;
    most = std::max(most, r);
  }
  EXPECT_EQ(total, kGroups + kRequests);
  const double mean = total / kWorkers;
  EXPECT_LE(most / mean, 1.5) << "max/mean routed load " << most << "/" << mean;
}

// Start-up refusals name the cause (exit 1 for a configuration the backend cannot serve, 2 for a
// bad option value).
TEST(ClusterSim, BadSimConfigurationsAreRefusedAtStart) {
  const std::string dir = make_temp_dir("tessera-sim-refusals");
  const struct {
    std::vector<std::string> args;
    int exit_code;
    std::string message;
  } cases[] = {
      {{"--kvstore", "tcp://127.0.0.1:1"}, 1, "--backend sim with --kvstore: the sim backend lacks capability kv_fill"},
      {{"--sim-cost", "1,2"}, 1, "--sim-cost must be four or five comma-separated microsecond figures"},
      {{"--sim-cost", "1,2,x,4"}, 1, "--sim-cost: field 3 ('x') is not a non-negative number"},
      {{"--sim-time-scale", "0"}, 2, "sim-time-scale"},
  };
  int n = 0;
  for (const auto& c : cases) {
    std::vector<std::string> args = {"--model", shared_path("models/stories260K/stories260K.bin"), "--scheduler",
                                     "tcp://127.0.0.1:1", "--backend", "sim"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const std::string log = dir + "/refused" + std::to_string(n++) + ".log";
    Process w(bin_path("tessera-worker"), with_keys(args), log);
    EXPECT_EQ(w.wait_exit(milliseconds(10000)), c.exit_code) << c.message;
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_NE(text.str().find(c.message), std::string::npos) << text.str();
  }
}

}  // namespace
}  // namespace tessera::testing
