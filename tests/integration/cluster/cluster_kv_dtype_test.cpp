// A worker with a reduced K/V pool (docs/kv.md): `--kv-dtype int8 --kv-memory-mb 4` announces the
// page count that budget buys (READY line, register -> the scheduler's page gauge, the worker's
// tessera_worker_kv_pool_bytes{dtype}) and serves completions through it; a bad dtype is refused
// at start naming the option. Real processes on loopback.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/http/client.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/wait.h"

namespace tessera::testing::cluster_test {
namespace {

using json = nlohmann::json;

// stories260K: 5 layers, 4 kv heads, head_dim 8; pages of 16 tokens. An int8 head row is 8 codes
// and one fp16 scale (10 bytes), so a page is 2 * 16 * 4 * 10 * 5 = 6400 bytes (f32: 20480).
constexpr int64_t kInt8PageBytes = 6400;
constexpr int64_t kPages = (int64_t{4} << 20) / kInt8PageBytes;  // 655; f32 would give 204

TEST(ClusterKvDtype, Int8PoolByMemoryBudgetRegistersItsPagesAndServes) {
  Cluster cluster(ClusterOptions{.worker_args = {"--kv-dtype", "int8", "--kv-memory-mb", "4"}});
  ASSERT_TRUE(cluster.ok()) << "cluster did not start";
  const std::string ready = cluster.worker().wait_line("READY", milliseconds(5000));
  EXPECT_EQ(line_field(ready, "pages"), std::to_string(kPages)) << ready;
  const int wp = std::atoi(line_field(ready, "metrics").c_str());
  ASSERT_GT(wp, 0) << ready;
  EXPECT_EQ(cluster.metric(wp, "tessera_worker_kv_pool_bytes", "dtype=\"int8\""), static_cast<double>(kPages * kInt8PageBytes));
  EXPECT_EQ(cluster.metric(wp, "tessera_worker_kv_pages", "state=\"total\""), static_cast<double>(kPages));
  // The scheduler plans with what the worker registered: free + held + cached = the pool.
  ASSERT_TRUE(wait_until([&] { return cluster.metric(cluster.metrics_port(), "tessera_scheduler_pages", "state=\"free\"") > 0; },
                         std::chrono::seconds(10)));
  double total = 0;
  for (const char* st : {"free", "held", "cached"})
    total += cluster.metric(cluster.metrics_port(), "tessera_scheduler_pages", std::string("state=\"") + st + "\"");
  EXPECT_EQ(total, static_cast<double>(kPages));
  const std::string body = json{{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}}.dump();
  auto r = http::request({.port = cluster.http_port(), .method = "POST", .path = "/v1/completions", .body = body,
                          .timeout_ms = 30000});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 24) << r->body;
  EXPECT_FALSE(j["choices"][0]["text"].get<std::string>().empty());
}

TEST(ClusterKvDtype, UnknownDtypeIsRefusedAtStartNamingTheOption) {
  const std::string dir = make_temp_dir("tessera-kv-dtype");
  Process w(bin_path("tessera-worker"),
            with_keys({"--model", shared_path("models/stories260K/stories260K.bin"), "--scheduler", "tcp://127.0.0.1:1",
                       "--kv-dtype", "int4"}),
            dir + "/w.log");
  const int rc = w.wait_exit(milliseconds(10000));
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "still running";
  std::ifstream in(w.log_path());
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("kv-dtype"), std::string::npos) << log;
}

}  // namespace
}  // namespace tessera::testing::cluster_test
