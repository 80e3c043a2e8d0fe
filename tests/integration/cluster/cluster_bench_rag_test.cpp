// `tessera bench --workload rag` end to end (docs/kv.md "CacheBlend", bench/rag.h): the real
// CLI against a real scheduler, worker and frontend with stories260K. Checks the report's
// structure and what each mode must show in the responses' usage — CacheBlend reused document
// K/V, the prefix mode only the prefix cache, the none mode nothing — never timings.
#include <chrono>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tessera/testing/cluster.h"
#include "tessera/testing/paths.h"

namespace tessera::testing::cluster_test {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(ClusterBenchRag, ThreeModesAgainstOneClusterReportTtftAndReuse) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok()) << "cluster did not start";
  const std::string dir = make_temp_dir("tessera-bench-rag");
  const std::string log = dir + "/bench.log", report = dir + "/rag.json";
  constexpr int kRequests = 4, kMaxTokens = 2;
  Process bench(bin_path("tessera"),
                {"bench", "--port", std::to_string(cluster.http_port()), "--workload", "rag", "--rag-pool", "4",
                 "--rag-k", "2", "--rag-doc-words", "20", "--prompt-words", "6", "--num-requests",
                 std::to_string(kRequests), "--concurrency", "2", "--max-tokens", std::to_string(kMaxTokens),
                 "--progress-s", "0", "--cpu-pids", std::to_string(cluster.worker().pid()), "--json", report,
                 "--scheduler-metrics-port", std::to_string(cluster.metrics_port())},
                log);
  // The table on stdout: a header, then one line per mode in order.
  const std::string header = bench.wait_line("mode ", milliseconds(120000));
  EXPECT_NE(header.find("TTFT p50"), std::string::npos) << header << read_file(log);
  EXPECT_NE(bench.wait_line("blend ", milliseconds(5000)), "");
  EXPECT_NE(bench.wait_line("none ", milliseconds(5000)).find("1.00x"), std::string::npos);
  ASSERT_EQ(bench.wait_exit(milliseconds(30000)), 0) << read_file(log) << cluster.logs();

  const json j = json::parse(read_file(report), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << read_file(report);
  EXPECT_EQ(j["config"]["workload"], "rag");
  EXPECT_EQ(j["config"]["rag_k"], 2);
  EXPECT_EQ(j["order"], json::array({"blend", "prefix", "none"}));
  for (const char* mode : {"blend", "prefix", "none"}) {
    SCOPED_TRACE(mode);
    ASSERT_TRUE(j["modes"].contains(mode)) << j.dump();
    const json& m = j["modes"][mode];
    EXPECT_EQ(m["ok"], kRequests);
    EXPECT_EQ(m["failed"], 0);
    EXPECT_EQ(m["ttft_ms"]["count"], kRequests);
    EXPECT_GT(m["ttft_ms"]["p50"].get<double>(), 0.0);
    EXPECT_GE(m["ttft_ms"]["p90"].get<double>(), m["ttft_ms"]["p50"].get<double>());
    EXPECT_GT(m["output_tokens_per_s"].get<double>(), 0.0);
    EXPECT_GT(m["requests_per_s"].get<double>(), 0.0);
    EXPECT_EQ(m["completion_tokens"], kRequests * kMaxTokens) << "usage arrives in the stream";
    EXPECT_GT(m["prompt_tokens"].get<int64_t>(), kRequests * 40);
    ASSERT_TRUE(m["cpu_s"].is_number()) << m.dump();
    EXPECT_GE(m["cpu_s"].get<double>(), 0.0);
    EXPECT_TRUE(m["ttft_p50_speedup_vs_none"].is_number());
  }
  const json& blend = j["modes"]["blend"];
  const json& prefix = j["modes"]["prefix"];
  const json& none = j["modes"]["none"];
  EXPECT_GT(blend["reused_prompt_tokens"].get<int64_t>(), 0) << "CacheBlend reused the warmed documents: " << blend.dump();
  EXPECT_EQ(prefix["reused_prompt_tokens"], 0);
  EXPECT_EQ(none["reused_prompt_tokens"], 0);
  // The warm-up sent every document first once, so each measured prefix-mode prompt starts with
  // a cached first document (BOS + >= 15 tokens: at least one 16-token page).
  EXPECT_GT(prefix["cached_prompt_tokens"].get<int64_t>(), 0) << prefix.dump();
  EXPECT_EQ(none["cached_prompt_tokens"], 0) << "a unique cache_salt per request shares nothing";
  EXPECT_EQ(prefix["prompt_tokens"], none["prompt_tokens"]) << "the same prompts";
  EXPECT_DOUBLE_EQ(none["ttft_p50_speedup_vs_none"].get<double>(), 1.0);
  // The scheduler's counters over the measured requests: every blend request blended (in one step
  // or more), no fallback; the other modes send no documents.
  ASSERT_TRUE(blend["blend_steps_per_request"].is_number()) << blend.dump();
  EXPECT_GE(blend["blend_steps_per_request"].get<double>(), 1.0);
  EXPECT_EQ(blend["blend_fallbacks_per_request"].get<double>(), 0.0);
  EXPECT_EQ(prefix["blend_steps_per_request"].get<double>(), 0.0);
  EXPECT_EQ(none["blend_steps_per_request"].get<double>(), 0.0);
}

TEST(ClusterBenchRag, BadOptionsExit2NamingThem) {
  const std::string dir = make_temp_dir("tessera-bench-rag-bad");
  auto run = [&](std::vector<std::string> args) {
    const std::string log = dir + "/bad.log";
    args.insert(args.begin(), {"bench", "--port", "1", "--workload", "rag"});
    Process p(bin_path("tessera"), args, log);
    const int code = p.wait_exit(milliseconds(20000));
    return std::make_pair(code, read_file(log));
  };
  auto [code, out] = run({"--rag-pool", "3", "--rag-k", "4"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("rag-k"), std::string::npos) << out;
  std::tie(code, out) = run({"--rag-modes", "blend,fast"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("rag-modes: 'fast'"), std::string::npos) << out;
  std::tie(code, out) = run({"--rag-pool", "60000", "--rag-doc-words", "100000"});  // 6e9 words: refused before drawing any
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("rag-pool x rag-doc-words"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::testing::cluster_test
