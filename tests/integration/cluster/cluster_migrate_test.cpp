// Request migration end to end (docs/scheduler.md "Failover and migration"): a streamed request
// (greedy, and sampled with a seed) whose worker is killed (-9) after tokens have reached the
// client continues on the other worker, and the client's stream completes without an error with
// exactly the text, finish_reason and usage of an uninterrupted run, after one pause of about
// --worker-dead-ms; when every worker dies, the stream ends with a clear peer_dead error instead.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/testing/cluster.h"
#include "tessera/testing/openai_client.h"
#include "tessera/testing/paths.h"

namespace tessera::testing::cluster_test {
namespace {

using nlohmann::json;

// The longest greedy case, asked for `max_tokens` tokens (EOS ignored: it ends by length).
json migrate_request(int max_tokens) {
  GreedyCase longest;
  for (const auto& c : greedy_cases())
    if (c.steps > longest.steps) longest = c;
  return json{{"prompt", longest.prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

// Sampled at temperature 0.8 with a seed: the new worker's RNG must start where the old one stopped.
json seeded_request(int max_tokens) {
  json r = migrate_request(max_tokens);
  r["temperature"] = 0.8;
  r["seed"] = 4242;
  return r;
}

std::string file_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Starts `s` and returns the index of the worker it was routed to (-1: none within 10 s).
int start_and_locate(Cluster& cluster, CompletionStream& s, std::thread& t) {
  const double before[2] = {routed_to(cluster, "w0"), routed_to(cluster, "w1")};
  t = std::thread([&] { run_completion_stream(cluster.http_port(), s); });
  int on = -1;
  (void)wait_until([&] {
    for (size_t w = 0; w < 2; ++w)
      if (routed_to(cluster, "w" + std::to_string(w)) > before[w]) on = static_cast<int>(w);
    return on >= 0;
  }, milliseconds(10000));
  return on;
}

constexpr int kMaxTokens = 300;

constexpr int kWorkerDeadMs = 1000;

// Runs `request` once uninterrupted (the reference), then streamed, killing (-9) the worker it
// runs on after tokens reached the client; the stream must complete like the reference.
void expect_migrated_stream_matches(const json& request) {
  // Paced (kPacedStepMs): the 300 tokens last >= 3 s, so the stream is still running when its
  // worker is frozen whatever the machine's load.
  Cluster cluster(ClusterOptions{.worker_dead_ms = kWorkerDeadMs, .num_workers = 2, .worker_min_step_ms = kPacedStepMs});
  ASSERT_TRUE(cluster.ok());
  auto ref = cluster.post("/v1/completions", request.dump());
  ASSERT_TRUE(ref.ok()) << ref.error().to_string();
  ASSERT_EQ(ref->status, 200) << ref->body;
  const json want = json::parse(ref->body);
  const std::string want_text = want["choices"][0]["text"].get<std::string>();
  ASSERT_EQ(want["usage"]["completion_tokens"].get<int>(), kMaxTokens);

  CompletionStream s;
  json body = request;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  s.body = body.dump();
  std::thread t;
  const int on = start_and_locate(cluster, s, t);
  ASSERT_GE(on, 0) << "the stream was routed to no worker\n" << cluster.logs();
  // Freeze its worker once tokens have reached the client, then kill it.
  const bool streaming = wait_until([&] { return s.chunks.load() >= 2 || s.ended.load(); }, milliseconds(15000));
  cluster.worker(static_cast<size_t>(on)).signal(SIGSTOP);
  const bool interrupted = streaming && !s.ended.load();
  const int chunks_at_kill = s.chunks.load();
  cluster.worker(static_cast<size_t>(on)).signal(SIGKILL);
  t.join();
  ASSERT_TRUE(interrupted) << "the stream ended before its worker was frozen; nothing to test\n" << cluster.logs();
  ASSERT_GE(chunks_at_kill, 1);

  EXPECT_EQ(s.status, 200);
  EXPECT_TRUE(s.error.empty()) << "the stream ended with an error: " << s.error << "\n" << cluster.logs();
  EXPECT_TRUE(s.done) << "no data: [DONE]";
  EXPECT_EQ(s.text, want_text) << "the migrated stream's text differs from the uninterrupted run's";
  EXPECT_EQ(s.finish_reason, "length");
  ASSERT_TRUE(s.usage.is_object()) << "no usage chunk";
  EXPECT_EQ(s.usage["prompt_tokens"], want["usage"]["prompt_tokens"]);
  EXPECT_EQ(s.usage["completion_tokens"].get<int>(), kMaxTokens);
  EXPECT_EQ(cluster.metric(cluster.metrics_port(), "tessera_scheduler_migrated_requests_total"), 1.0) << cluster.logs();
  EXPECT_EQ(cluster.metric(cluster.metrics_port(), "tessera_scheduler_peer_dead_requests_total"), 0.0);
  // The finish line counts the move.
  EXPECT_TRUE(wait_until([&] { return file_text(cluster.scheduler().log_path()).find("migrations=1") != std::string::npos; },
                         milliseconds(5000)))
      << cluster.logs();
  EXPECT_TRUE(cluster.worker(static_cast<size_t>(1 - on)).alive());
  // The client saw one pause: the scheduler's failure detection plus the re-prefill.
  std::printf("migration pause seen by the client: %.3f s (--worker-dead-ms %d)\n", s.max_gap_s, kWorkerDeadMs);
  EXPECT_LT(s.max_gap_s, scaled(kWorkerDeadMs / 1000.0 + 4.0));
}

TEST(ClusterMigrate, GreedyStreamContinuesOnTheOtherWorkerWithTheUninterruptedText) {
  expect_migrated_stream_matches(migrate_request(kMaxTokens));
}

TEST(ClusterMigrate, SeededSampledStreamContinuesWithTheUninterruptedText) {
  expect_migrated_stream_matches(seeded_request(kMaxTokens));
}

TEST(ClusterMigrate, EveryWorkerDeadEndsTheStreamWithAClearError) {
  Cluster cluster(ClusterOptions{.worker_dead_ms = 1000, .num_workers = 2, .worker_min_step_ms = kPacedStepMs});
  ASSERT_TRUE(cluster.ok());
  CompletionStream s;
  json body = migrate_request(kMaxTokens);
  body["stream"] = true;
  s.body = body.dump();
  std::thread t;
  const int on = start_and_locate(cluster, s, t);
  ASSERT_GE(on, 0) << "the stream was routed to no worker\n" << cluster.logs();
  const bool streaming = wait_until([&] { return s.chunks.load() >= 1 || s.ended.load(); }, milliseconds(15000));
  for (size_t w = 0; w < 2; ++w) cluster.worker(w).signal(SIGSTOP);
  const bool interrupted = streaming && !s.ended.load();
  for (size_t w = 0; w < 2; ++w) cluster.worker(w).signal(SIGKILL);
  t.join();
  ASSERT_TRUE(interrupted) << "the stream ended before the workers were frozen; nothing to test\n" << cluster.logs();
  EXPECT_EQ(s.status, 200);
  EXPECT_FALSE(s.error.empty()) << "a stream whose workers all died ended without an error event";
  EXPECT_NE(s.finish_reason, "length") << "a stream whose workers all died cannot complete";
  EXPECT_NE(s.error.find("peer_dead"), std::string::npos) << s.error;
  EXPECT_NE(s.error.find("no live worker is left"), std::string::npos) << s.error;
  EXPECT_EQ(cluster.metric(cluster.metrics_port(), "tessera_scheduler_peer_dead_requests_total"), 1.0) << cluster.logs();
  EXPECT_TRUE(cluster.scheduler().alive());
}

// The pacing these tests rely on (tessera-worker --min-step-ms, docs/operations.md "Pacing"):
// a generation of N tokens lasts at least N steps of it; a value out of range is refused at start.
TEST(WorkerPacing, AGenerationOfNTokensLastsAtLeastNPacedSteps) {
  Cluster cluster(ClusterOptions{.worker_min_step_ms = 20});
  ASSERT_TRUE(cluster.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = cluster.post("/v1/completions", migrate_request(25).dump());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 25);
  EXPECT_GE(ms, 25 * 20) << "25 tokens at --min-step-ms 20";
  EXPECT_NE(file_text(cluster.worker().log_path()).find("pacing: every step lasts at least 20 ms"), std::string::npos);

  const std::string log = make_temp_dir("tessera-pacing") + "/worker.log";
  Process bad(bin_path("tessera-worker"), {"--model", "unused", "--min-step-ms", "1001"}, log);
  EXPECT_EQ(bad.wait_exit(milliseconds(10000)), 2);
  EXPECT_NE(file_text(log).find("--min-step-ms"), std::string::npos) << file_text(log);
}

}  // namespace
}  // namespace tessera::testing::cluster_test
