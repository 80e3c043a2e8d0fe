// Operations (docs/operations.md): access, finish and stats log lines with their fields, in text
// and JSON; finish reasons stop and disconnect; every request-level series present at start-up;
// `promtool check metrics` on each process's /metrics when promtool is installed.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/common/metrics.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/paths.h"

namespace tessera::testing {
namespace {

using json = nlohmann::json;
using Fields = std::map<std::string, std::string>;

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

// Text format: "<time> <L> <process> | <event> k=v k=\"v w\"" -> {"_event": event, "_ts": time,
// "_process": process, k: v, ...}; empty when the line is not the event.
Fields parse_text_event(const std::string& line, const std::string& event) {
  Fields f;
  const size_t bar = line.find(" | ");
  if (bar == std::string::npos) return f;
  std::istringstream head(line.substr(0, bar));
  std::string ts, level, process;
  head >> ts >> level >> process;
  std::string rest = line.substr(bar + 3);
  if (rest.rfind(event + " ", 0) != 0) return f;
  f["_ts"] = ts;
  f["_process"] = process;
  size_t i = event.size() + 1;
  while (i < rest.size()) {
    size_t eq = rest.find('=', i);
    if (eq == std::string::npos) break;
    std::string key = rest.substr(i, eq - i), value;
    size_t j = eq + 1;
    if (j < rest.size() && rest[j] == '"') {
      size_t end = rest.find('"', j + 1);
      value = rest.substr(j + 1, end - j - 1);
      j = end + 2;
    } else {
      size_t end = rest.find(' ', j);
      value = rest.substr(j, end == std::string::npos ? std::string::npos : end - j);
      j = end == std::string::npos ? rest.size() : end + 1;
    }
    f[key] = value;
    i = j;
  }
  return f;
}

// The first `event` line of a text log whose fields match `want`; waits for it.
Fields wait_text_event(Process& p, const std::string& event, const Fields& want) {
  Fields found;
  wait_until(
      [&] {
        for (const auto& line : lines_of(read_all(p.log_path()))) {
          Fields f = parse_text_event(line, event);
          if (f.empty()) continue;
          bool match = true;
          for (const auto& [k, v] : want) match = match && f.count(k) && f[k] == v;
          if (match) {
            found = f;
            return true;
          }
        }
        return false;
      },
      milliseconds(10000));
  return found;
}

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return *end == '\0';
}

// A stop string the greedy generation of the first case is sure to reach.
std::pair<std::string, std::string> stop_case() {
  const GreedyCase c = greedy_cases().at(0);
  return {c.prompt, c.completion.substr(c.completion.size() / 2, 4)};
}

const char* const kFrontendSeries[] = {
    "tessera_frontend_ttft_seconds_count",          "tessera_frontend_request_seconds_count",
    "tessera_frontend_time_per_output_token_seconds_count", "tessera_frontend_inter_token_latency_seconds_count",
    "tessera_frontend_queue_seconds_count",         "tessera_frontend_prompt_length_tokens_count",
    "tessera_frontend_generation_length_tokens_count", "tessera_frontend_prompt_tokens_total",
    "tessera_frontend_completion_tokens_total"};

class ClusterOpsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new Cluster(ClusterOptions{.scheduler_args = {"--stats-interval-s", "1", "--name", "s0"}});
    if (cluster_->ok())  // the worker's /metrics: --metrics-port 0 by default, bound port in READY
      worker_metrics_port_ = std::atoi(line_field(cluster_->worker().wait_line("READY", milliseconds(5000)), "metrics").c_str());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (!cluster_->ok()) GTEST_SKIP() << "cluster did not start";
  }
  static Cluster* cluster_;
  static inline int worker_metrics_port_ = 0;
};
Cluster* ClusterOpsTest::cluster_ = nullptr;

// Runs first (declaration order): no request has reached this cluster yet.
TEST_F(ClusterOpsTest, EverySeriesExistsAtStartUp) {
  for (const char* name : kFrontendSeries)
    EXPECT_EQ(cluster_->metric(cluster_->http_port(), name, "model=\""), 0.0) << name;
  for (const char* reason : {"stop", "length", "cancelled", "error", "disconnect"})
    EXPECT_EQ(cluster_->metric(cluster_->http_port(), "tessera_frontend_requests_finished_total",
                               std::string("finish_reason=\"") + reason + "\""),
              0.0)
        << reason;
  EXPECT_EQ(cluster_->metric(cluster_->metrics_port(), "tessera_scheduler_kv_cache_usage_ratio"), 0.0);
  EXPECT_EQ(cluster_->metric(cluster_->metrics_port(), "tessera_scheduler_generation_tokens_total"), 0.0);
  // The worker's series (docs/operations.md "Worker metrics"), before its first step.
  ASSERT_GT(worker_metrics_port_, 0);
  const int wp = worker_metrics_port_;
  EXPECT_EQ(cluster_->metric(wp, "tessera_worker_info", "kernel_isa=\""), 1.0);
  EXPECT_EQ(cluster_->metric(wp, "tessera_worker_info", "model=\"stories260K.bin\""), 1.0);
  EXPECT_EQ(cluster_->metric(wp, "tessera_worker_kv_pages", "state=\"total\""), 512.0);
  EXPECT_EQ(cluster_->metric(wp, "tessera_worker_kv_pages", "state=\"used\""), 0.0);
  EXPECT_EQ(cluster_->metric(wp, "tessera_worker_registered", "worker=\"w0\""), 1.0);
  EXPECT_EQ(cluster_->metric(wp, "tessera_worker_draining"), 0.0);
  EXPECT_GT(cluster_->metric(wp, "tessera_worker_resident_memory_bytes"), 1e6);
  for (const char* name : {"tessera_worker_step_seconds_count", "tessera_worker_batch_size_count",
                           "tessera_worker_step_tokens_count", "tessera_worker_steps_total", "tessera_worker_tokens_total"})
    EXPECT_EQ(cluster_->metric(wp, name), 0.0) << name;
  auto ready = cluster_->get("/ready", wp);
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(ready->status, 200) << ready->body;
  // The bucket of the end-to-end histogram reaches an hour (the request timeout is 300 s).
  EXPECT_EQ(cluster_->metric(cluster_->http_port(), "tessera_frontend_request_seconds_bucket", "le=\"3600\""), 0.0);
}

TEST_F(ClusterOpsTest, StopStringCountsAsStopAndIsLogged) {
  const auto [prompt, stop] = stop_case();
  const std::string body =
      json{{"prompt", prompt}, {"max_tokens", 64}, {"temperature", 0}, {"stop", {stop}}, {"user", "alice@example.com"}}.dump();
  auto r = http::request({.port = cluster_->http_port(), .method = "POST", .path = "/v1/completions", .body = body,
                          .headers = {{"x-request-id", "ops-stop-1"}}, .timeout_ms = 30000});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(r->status, 200) << r->body;
  ASSERT_EQ(json::parse(r->body)["choices"][0]["finish_reason"], "stop") << r->body;
  EXPECT_EQ(cluster_->metric(cluster_->http_port(), "tessera_frontend_requests_finished_total", "finish_reason=\"stop\""), 1.0);
  EXPECT_EQ(cluster_->metric(cluster_->http_port(), "tessera_frontend_requests_finished_total", "finish_reason=\"cancelled\""), 0.0);
  EXPECT_EQ(cluster_->metric(cluster_->http_port(), "tessera_frontend_request_seconds_count"), 1.0);
  EXPECT_EQ(cluster_->metric(cluster_->http_port(), "tessera_frontend_prompt_length_tokens_count"), 1.0);

  Fields a = wait_text_event(cluster_->frontend(), "access", {{"req", "ops-stop-1"}});
  ASSERT_FALSE(a.empty()) << cluster_->logs();
  EXPECT_EQ(a["_process"], "frontend");
  EXPECT_EQ(a["_ts"].size(), std::string("2026-01-01T00:00:00.000Z").size()) << a["_ts"];
  EXPECT_EQ(a["method"], "POST");
  EXPECT_EQ(a["route"], "/v1/completions");
  EXPECT_EQ(a["status"], "200");
  EXPECT_EQ(a["finish_reason"], "stop");
  EXPECT_EQ(a["client"].rfind("127.0.0.1:", 0), 0u) << a["client"];
  for (const char* k : {"prompt_tokens", "cached_tokens", "completion_tokens", "ttft_ms", "duration_ms"})
    EXPECT_TRUE(is_number(a[k])) << k << "=" << a[k];
  EXPECT_GT(std::stoi(a["prompt_tokens"]), 0);
  EXPECT_EQ(a["user"].size(), 12u) << a["user"];
  EXPECT_EQ(read_all(cluster_->frontend().log_path()).find("alice"), std::string::npos) << "the raw user id is never logged";

  // The scheduler's line for the same request (the frontend cancelled it at the stop string).
  Fields fin = wait_text_event(cluster_->scheduler(), "finish", {{"worker", "w0"}});
  ASSERT_FALSE(fin.empty()) << cluster_->logs();
  EXPECT_EQ(fin["_process"], "scheduler/s0");
  for (const char* k : {"queue_ms", "ttft_ms", "duration_ms", "preemptions", "prompt_tokens", "completion_tokens"})
    EXPECT_TRUE(is_number(fin[k])) << k << "=" << fin[k];
  EXPECT_FALSE(fin["finish_reason"].empty());

  // A stats line (every second here) once the request has run.
  Fields st = wait_text_event(cluster_->scheduler(), "stats", {{"scheduler", "s0"}, {"workers", "1"}});
  ASSERT_FALSE(st.empty()) << cluster_->logs();
  for (const char* k : {"running", "waiting", "pages_free", "pages_held", "pages_cached", "kv_usage", "prefix_hit_rate",
                        "gen_tokens_per_s"})
    EXPECT_TRUE(is_number(st[k])) << k << "=" << st[k];
  EXPECT_EQ(std::stoi(st["pages_free"]) + std::stoi(st["pages_held"]) + std::stoi(st["pages_cached"]), 512);
}

// After a request: the worker counted its steps and tokens. One scrape per look (the worker may
// still run a release-only step after the answer, and a scrape may fall between two updates of
// one step): wait until a scrape is consistent.
TEST_F(ClusterOpsTest, WorkerMetricsCountSteps) {
  auto r = cluster_->post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 12, "ignore_eos": true})");
  ASSERT_TRUE(r.ok() && r->status == 200);
  std::map<std::string, double> m;
  const bool consistent = wait_until(
      [&] {
        auto scrape = cluster_->get("/metrics", worker_metrics_port_);
        if (!scrape.ok()) return false;
        auto samples = metrics::parse_text(scrape->body);
        if (!samples.ok()) return false;
        m.clear();
        for (const auto& smp : *samples) m[smp.name + (smp.labels.find("result=\"error\"") != std::string::npos ? ":error" : "")] += smp.value;
        const double steps = m["tessera_worker_steps_total"];
        return steps >= 12.0 && m["tessera_worker_step_seconds_count"] == steps && m["tessera_worker_batch_size_count"] == steps &&
               m["tessera_worker_step_tokens_count"] == steps;
      },
      milliseconds(5000));
  EXPECT_TRUE(consistent) << "steps " << m["tessera_worker_steps_total"] << ", step_seconds_count "
                          << m["tessera_worker_step_seconds_count"] << ", batch_size_count " << m["tessera_worker_batch_size_count"];
  EXPECT_GE(m["tessera_worker_tokens_total"], 12.0);  // a prefill step, then one decode step per token (at least)
  EXPECT_EQ(m["tessera_worker_steps_total:error"], 0.0);
}

TEST_F(ClusterOpsTest, ClientDisconnectCountsAsDisconnect) {
  std::atomic<int> events{0};
  const std::string body = json{{"prompt", "Once upon a time"}, {"max_tokens", 480}, {"temperature", 0}, {"stream", true},
                                {"ignore_eos", true}}.dump();
  auto r = http::request({.port = cluster_->http_port(), .method = "POST", .path = "/v1/completions", .body = body,
                          .headers = {{"x-request-id", "ops-gone-1"}}, .timeout_ms = 20000,
                          .on_body = [&](std::string_view) { return ++events < 2; }});  // leave after 2 chunks
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_TRUE(wait_until(
      [&] {
        return cluster_->metric(cluster_->http_port(), "tessera_frontend_requests_finished_total",
                                "finish_reason=\"disconnect\"") >= 1.0;
      },
      milliseconds(10000)))
      << cluster_->logs();
  EXPECT_EQ(cluster_->metric(cluster_->http_port(), "tessera_frontend_requests_finished_total", "finish_reason=\"cancelled\""), 0.0);
  Fields a = wait_text_event(cluster_->frontend(), "access", {{"req", "ops-gone-1"}});
  ASSERT_FALSE(a.empty()) << cluster_->logs();
  EXPECT_EQ(a["finish_reason"], "disconnect");
}

TEST_F(ClusterOpsTest, PromtoolAcceptsEveryMetricsEndpoint) {
  if (std::system("command -v promtool > /dev/null 2>&1") != 0) GTEST_SKIP() << "promtool is not installed";
  // A kvstore too, its endpoint on the dual-stack "::" (scraped over IPv6 and IPv4).
  Process kv(bin_path("tessera-kvstore"), with_keys({"--listen", "tcp://127.0.0.1:*", "--metrics-host", "::"}),
             make_temp_dir("tessera-kv-metrics") + "/kvstore.log");
  const int kv_port = std::atoi(line_field(kv.wait_line("tessera-kvstore listening", milliseconds(10000)), "metrics").c_str());
  ASSERT_GT(kv_port, 0);
  auto kv6 = http::request({.host = "::1", .port = kv_port, .method = "GET", .path = "/metrics", .timeout_ms = 5000});
  ASSERT_TRUE(kv6.ok()) << kv6.error().to_string();
  for (const char* series : {"tessera_kvstore_l1_entries 0", "tessera_kvstore_l1_bytes 0", "tessera_kvstore_hits_total{tier=\"l1\"} 0",
                             "tessera_kvstore_misses_total{tier=\"l2\"} 0", "tessera_kvstore_put_bytes_total 0",
                             "tessera_kvstore_get_bytes_total 0", "tessera_kvstore_redis_up 0", "tessera_kvstore_l2_errors_total 0"})
    EXPECT_NE(kv6->body.find(series), std::string::npos) << series << " missing from the kvstore's /metrics";
  auto kvh = http::request({.port = kv_port, .method = "GET", .path = "/health", .timeout_ms = 5000});
  ASSERT_TRUE(kvh.ok());
  EXPECT_EQ(kvh->body, "{\"status\":\"ok\",\"redis\":\"off\"}");
  for (int port : {cluster_->http_port(), cluster_->metrics_port(), worker_metrics_port_, kv_port}) {
    auto r = cluster_->get("/metrics", port);
    ASSERT_TRUE(r.ok() && r->status == 200);
    const std::string path = make_temp_dir("tessera-promtool") + "/metrics.txt";
    std::ofstream(path) << r->body;
    const std::string cmd = "promtool check metrics < " + path + " > " + path + ".out 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "port " << port << ":\n" << read_all(path + ".out");
  }
}

// --log-format json: every line each process writes to its log is one JSON object.
TEST(ClusterOpsJsonTest, EveryLogLineIsJson) {
  const std::vector<std::string> fmt = {"--log-format", "json"};
  Cluster cluster(ClusterOptions{.scheduler_args = {"--log-format", "json", "--stats-interval-s", "1"},
                                 .worker_args = fmt,
                                 .frontend_args = fmt});
  ASSERT_TRUE(cluster.ok());
  auto r = cluster.post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 4, "user": "bob"})");
  ASSERT_TRUE(r.ok() && r->status == 200);
  json access, stats;
  ASSERT_TRUE(wait_until(
      [&] {
        for (const auto& line : lines_of(read_all(cluster.frontend().log_path()))) {
          json j = json::parse(line, nullptr, false);
          if (!j.is_discarded() && j.value("event", "") == "access" && j.value("route", "") == "/v1/completions") access = j;
        }
        for (const auto& line : lines_of(read_all(cluster.scheduler().log_path()))) {
          json j = json::parse(line, nullptr, false);
          if (!j.is_discarded() && j.value("event", "") == "stats") stats = j;
        }
        return !access.is_null() && !stats.is_null();
      },
      milliseconds(10000)))
      << cluster.logs();
  EXPECT_EQ(access["process"], "frontend");
  EXPECT_EQ(access["level"], "info");
  EXPECT_EQ(access["status"], 200);
  EXPECT_TRUE(access["prompt_tokens"].is_number());
  EXPECT_TRUE(access["completion_tokens"].is_number());
  EXPECT_TRUE(access["duration_ms"].is_number());
  EXPECT_EQ(access["finish_reason"], "length");
  EXPECT_EQ(access["user"].get<std::string>().size(), 12u);
  EXPECT_TRUE(stats["running"].is_number());
  EXPECT_TRUE(stats["kv_usage"].is_number());
  for (Process* p : {&cluster.frontend(), &cluster.scheduler(), &cluster.worker(0)}) {
    const auto lines = lines_of(read_all(p->log_path()));
    EXPECT_FALSE(lines.empty()) << p->log_path();
    for (const auto& line : lines) {
      json j = json::parse(line, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << p->log_path() << ": not JSON: " << line;
      EXPECT_TRUE(j.contains("ts") && j.contains("level") && j.contains("process")) << line;
    }
  }
}

}  // namespace
}  // namespace tessera::testing
