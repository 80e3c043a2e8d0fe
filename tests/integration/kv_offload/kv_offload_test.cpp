// K/V offload end to end: a long prompt computed on one worker, evicted from its small pool by
// a flood of other prompts (the scheduler plans spills; the worker puts the pages to the kvstore,
// Redis behind it), then the same prompt routed to the OTHER worker, which has never computed it:
// it reloads the prefix from the kvstore (usage.prompt_tokens_details.cached_tokens and the
// scheduler's reload counters say so) and answers exactly what the cold run answered (greedy,
// zstd from f32: bit-exact K/V). Real processes on loopback: redis-server, tessera-kvstore,
// tessera-scheduler, two tessera-worker (--kv-offload), tessera-frontend.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

#include "tessera/common/metrics.h"
#include "tessera/kvstore/client.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/kv_process.h"
#include "tessera/testing/redis_server.h"

namespace tessera::testing {
namespace {

using json = nlohmann::json;

std::string story(const std::string& who, int sentences) {
  static const char* kParts[] = {" went to the park and saw a big red ball.", " was happy and played with the dog all day.",
                                 " found a little bird in the tall green tree.", " ate a sweet apple under the warm sun.",
                                 " said hello to a friendly cat on the way home."};
  std::string s;
  for (int i = 0; i < sentences; ++i) s += (i == 0 ? "" : " ") + who + kParts[i % 5];
  return s;
}

class KvOffloadCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = RedisServer::start();
    ASSERT_NE(redis_, nullptr) << "redis-server did not start";
    kv_ = kvstore::testing::KvProcess::start({"--redis", redis_->address(), "--hmac-secret", "offload-test"});
    ASSERT_NE(kv_, nullptr);
    cluster_ = std::make_unique<Cluster>(ClusterOptions{
        .num_pages = 40,  // 640 tokens: a few long prompts evict each other
        .num_workers = 2,
        .worker_args = {"--kvstore", kv_->endpoint(), "--kv-offload", "true", "--kv-offload-codec", "zstd",
                        "--kv-offload-dtype", "f32",
                        // A put that times out is a page not offloaded (a warning, and the test's
                        // count falls short): on a loaded CI machine 2 s (the default) was once
                        // not enough for one of ~16 puts.
                        "--kvstore-timeout-ms", "20000"}});
    ASSERT_TRUE(cluster_->ok());
  }

  // A series not exported yet (nothing counted) reads as 0.
  double sched(const std::string& name, const std::string& filter = "") const {
    const double v = cluster_->metric(cluster_->metrics_port(), name, filter);
    return std::isnan(v) ? 0.0 : v;
  }
  double routed(int w) const { return sched("tessera_scheduler_routed_requests_total", "worker=\"w" + std::to_string(w) + "\""); }

  json complete(const std::string& prompt, int max_tokens, const std::string& routing_key) {
    json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true},
                 {"routing_key", routing_key}};
    auto r = cluster_->post("/v1/completions", body.dump());
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
    if (!r.ok()) return json{};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body, nullptr, false);
  }
  // The worker (0 or 1) the next request with `key` goes to, found with a one-token probe.
  int worker_of(const std::string& key) {
    const double w0 = routed(0), w1 = routed(1);
    complete("Hi", 1, key);
    // The counters are published on the scheduler's next tick.
    if (!wait_until([&] { return routed(0) > w0 || routed(1) > w1; }, milliseconds(5000))) return -1;
    return routed(0) > w0 ? 0 : 1;
  }

  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<kvstore::testing::KvProcess> kv_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(KvOffloadCluster, PrefixEvictedOnOneWorkerIsReloadedByTheOther) {
  const std::string prompt = story("Lily", 14);
  // 1. The cold run, on whichever worker the key names.
  const int first = worker_of("offload-a");
  ASSERT_GE(first, 0) << cluster_->logs();
  const json cold = complete(prompt, 12, "offload-a");
  const int prompt_tokens = cold["usage"]["prompt_tokens"].get<int>();
  ASSERT_GE(prompt_tokens, 160) << "the prompt should span many pages";
  ASSERT_LE(prompt_tokens, 400);
  EXPECT_EQ(cold["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  const int full_pages = (prompt_tokens - 1) / 16;
  // 2. Flood the same worker with other long prompts: the prompt's pages are evicted and spilled.
  const char* names[] = {"Tom", "Sam", "Max", "Ben", "Zoe"};
  for (const char* who : names) complete(story(who, 14), 12, "offload-a");
  ASSERT_TRUE(wait_until([&] { return sched("tessera_scheduler_kv_offload_offloaded_pages_total") >= full_pages; },
                         milliseconds(20000)))
      << "offloaded " << sched("tessera_scheduler_kv_offload_offloaded_pages_total") << " pages\n" << cluster_->logs();
  EXPECT_GE(sched("tessera_scheduler_kv_offload_spilled_pages_total"), full_pages);
  // The blobs are in Redis too (L2), not only in the kvstore's memory.
  EXPECT_GT(std::stoll(redis_->command({"DBSIZE"})), 0);
  // 3. A key routed to the other worker; it has never seen the prompt.
  std::string other_key;
  for (int i = 0; i < 40 && other_key.empty(); ++i) {
    const std::string k = "offload-b" + std::to_string(i);
    if (worker_of(k) == 1 - first) other_key = k;
  }
  ASSERT_FALSE(other_key.empty()) << "no routing key reached the other worker";
  const double before = routed(1 - first);
  const json warm = complete(prompt, 12, other_key);
  EXPECT_TRUE(wait_until([&] { return routed(1 - first) == before + 1; }, milliseconds(5000)))
      << "the request went to the worker that never computed the prompt";
  EXPECT_EQ(warm["choices"][0]["text"], cold["choices"][0]["text"]) << "reloaded K/V must give the cold run's greedy text";
  const int cached = warm["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GE(cached, 16 * (full_pages - 1)) << "the prefix came from the kvstore";
  // The scheduler publishes its counters on its next tick.
  EXPECT_TRUE(wait_until([&] { return sched("tessera_scheduler_kv_offload_reloaded_pages_total") >= full_pages - 1; },
                         milliseconds(5000)))
      << sched("tessera_scheduler_kv_offload_reloaded_pages_total") << " pages reloaded";
  EXPECT_GE(sched("tessera_scheduler_kv_offload_reloads_total"), 1.0);
  EXPECT_GT(sched("tessera_scheduler_kv_offload_reload_bytes_total"), 0.0);
  // One kvstore round trip per reload (`get_many`, up to 64 pages each), never one per page.
  auto kc = kvstore::Client::connect({.endpoint = kv_->endpoint(), .timeout_ms = 5000,
                                      .curve = client_keys(curve::Role::kFrontend, curve::Role::kKvstore)});
  ASSERT_TRUE(kc.ok()) << kc.error().to_string();
  auto st = (*kc)->stats();
  ASSERT_TRUE(st.ok()) << st.error().to_string();
  auto samples = metrics::parse_text(st->metrics);
  ASSERT_TRUE(samples.ok()) << samples.error().to_string();
  double get_many = -1, get = -1;
  for (const auto& s : *samples) {
    if (s.name != "tessera_kvstore_requests_total") continue;
    if (s.labels == "type=\"get_many\"") get_many = s.value;
    if (s.labels == "type=\"get\"") get = s.value;
  }
  EXPECT_EQ(get_many, sched("tessera_scheduler_kv_offload_reloads_total")) << st->metrics;
  EXPECT_EQ(get, 0.0) << "no per-page gets";
}

}  // namespace
}  // namespace tessera::testing
