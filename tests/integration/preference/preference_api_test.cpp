// DKI preference injection end to end over HTTP (issue 5, "End to end"): two clusters sharing
// one Redis. Real processes on loopback: redis-server, two tessera-kvstore nodes on that Redis
// (same HMAC secret), and per cluster a tessera-scheduler, a tessera-worker (stories260K,
// --kvstore its node, zstd codec so K/V is exact) and a tessera-frontend (--kvstore its node).
//
//   cluster A computes user alice's (stored) preference; cluster B, which never computed it,
//   serves alice's next request from the kvstore (Redis) — `usage.preference.source` and both
//   clusters' /metrics say so — with the same greedy text;
//   alpha 0.05 gives exactly the text without a preference;
//   bob, without a preference, never gets alice's; with the same text he computes his own;
//   POST /admin/v1/users/alice/invalidate makes alice's next request compute again;
//   admin endpoints: 403 without a configured token, 401 with a wrong one.
#include <cmath>
#include <iostream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/http/client.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/kv_process.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/redis_server.h"

namespace tessera::preference_test {
namespace {

using testing::line_field;
using testing::Process;
using testing::wait_until;
using json = nlohmann::json;
using std::chrono::milliseconds;

constexpr const char* kToken = "s3cret-admin";
constexpr const char* kPreference =
    "Tom had a big red ball. Tom and his dog played with the ball in the park every day. Tom was happy.";

struct Reply {
  int status = 0;
  std::string body;
};

// One HTTP/1.1 request with an optional bearer token. status 0 when the connection failed.
Reply http(int port, const std::string& method, const std::string& path, const std::string& body = "",
           const std::string& token = "") {
  http::Request req{.port = port, .method = method, .path = path, .body = body, .timeout_ms = 60000};
  if (!token.empty()) req.headers.push_back({"Authorization", "Bearer " + token});
  auto r = http::request(req);
  if (!r.ok()) return {};
  return {.status = r->status, .body = std::move(r->body)};
}

// Sum of the samples of `name` whose label text contains `filter` (0 when none).
double metric(int port, const std::string& path, const std::string& name, const std::string& filter = "") {
  Reply r = http(port, "GET", path);
  double sum = 0.0;
  size_t pos = 0;
  while (pos < r.body.size()) {
    size_t eol = r.body.find('\n', pos);
    if (eol == std::string::npos) eol = r.body.size();
    const std::string line = r.body.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line[0] == '#' || line.compare(0, name.size(), name) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    const size_t sp = line.rfind(' ');
    if (line.substr(0, sp).find(filter) == std::string::npos) continue;
    sum += std::atof(line.c_str() + sp + 1);
  }
  return sum;
}

// One scheduler + worker + frontend.
struct MiniCluster {
  std::string dir;
  std::unique_ptr<Process> scheduler, worker, frontend;
  int http_port = 0, sched_metrics = 0;

  bool start(const std::string& name, const std::string& kvstore, const std::string& admin_token) {
    using testing::bin_path;
    using testing::shared_path;
    dir = testing::make_temp_dir("tessera-pref-" + name);
    const std::string model = shared_path("models/stories260K/stories260K.bin");
    const std::string tok = shared_path("models/stories260K/tok512.bin");
    scheduler = std::make_unique<Process>(bin_path("tessera-scheduler"),
                                        testing::with_keys({"--frontend-endpoint", "tcp://127.0.0.1:*", "--worker-endpoint",
                                                            "tcp://127.0.0.1:*", "--metrics-port", "0", "--heartbeat-ms", "100"}),
                                        dir + "/scheduler.log");
    const std::string sline = scheduler->wait_line("LISTENING", milliseconds(10000));
    if (sline.empty()) return false;
    sched_metrics = std::atoi(line_field(sline, "metrics").c_str());
    worker = std::make_unique<Process>(bin_path("tessera-worker"),
                                     testing::with_keys({"--model", model, "--scheduler", line_field(sline, "workers"),
                                                         "--threads", "1", "--num-pages", "256", "--name", name + "-w",
                                                         "--kvstore", kvstore, "--kv-codec", "zstd"}),
                                     dir + "/worker.log");
    std::vector<std::string> fargs = {"--http-port", "0", "--zmq-endpoint", "", "--schedulers", line_field(sline, "frontends"),
                                      "--model", model, "--tokenizer", tok, "--heartbeat-ms", "100", "--kvstore", kvstore};
    if (!admin_token.empty()) fargs.insert(fargs.end(), {"--admin-token", admin_token});
    frontend = std::make_unique<Process>(bin_path("tessera-frontend"), testing::with_keys(fargs), dir + "/frontend.log");
    const std::string fline = frontend->wait_line("LISTENING", milliseconds(15000));
    if (fline.empty()) return false;
    http_port = std::atoi(line_field(fline, "http").c_str());
    return wait_until([&] { return http(http_port, "GET", "/ready").status == 200; }, milliseconds(15000));
  }
  double sched_metric(const std::string& name, const std::string& filter = "") const {
    return metric(sched_metrics, "/metrics", name, filter);
  }
  double fe_metric(const std::string& name, const std::string& filter = "") const {
    return metric(http_port, "/metrics", name, filter);
  }
  ~MiniCluster() {
    for (Process* c : {frontend.get(), worker.get(), scheduler.get()})
      if (c) c->signal(SIGTERM);
    for (Process* c : {frontend.get(), worker.get(), scheduler.get()})
      if (c) (void)c->wait_exit(milliseconds(5000));
  }
};

struct Completion {
  int status = 0;
  std::string text;
  json usage;
  std::string raw;
};

Completion complete(const MiniCluster& c, json body, const std::string& prompt = "Tom") {
  body["prompt"] = prompt;
  body["max_tokens"] = 24;
  body["temperature"] = 0;
  Reply r = http(c.http_port, "POST", "/v1/completions", body.dump());
  Completion out{.status = r.status, .raw = r.body};
  json j = json::parse(r.body, nullptr, false);
  if (r.status == 200 && j.is_object()) {
    out.text = j["choices"][0]["text"].get<std::string>();
    out.usage = j["usage"];
  }
  return out;
}

std::string source_of(const Completion& c) {
  return c.usage.contains("preference") ? c.usage["preference"]["source"].get<std::string>() : "";
}

TEST(PreferenceApi, TwoClustersShareAPreferenceThroughRedis) {
  auto redis = testing::RedisServer::start();
  ASSERT_NE(redis, nullptr) << "redis-server did not start";
  using kvstore::testing::KvProcess;
  auto node1 = KvProcess::start({"--redis", redis->address(), "--hmac-secret", "pref-api-test"});
  auto node2 = KvProcess::start({"--redis", redis->address(), "--hmac-secret", "pref-api-test"});
  ASSERT_NE(node1, nullptr);
  ASSERT_NE(node2, nullptr);
  MiniCluster a, b;
  ASSERT_TRUE(a.start("a", node1->endpoint(), kToken)) << "cluster A did not come up (logs in " << a.dir << ")";
  ASSERT_TRUE(b.start("b", node2->endpoint(), "")) << "cluster B did not come up (logs in " << b.dir << ")";

  // Admin auth: B has no token configured (403), A refuses a wrong or missing one (401).
  EXPECT_EQ(http(b.http_port, "GET", "/admin/v1/users/alice/preference", "", kToken).status, 403);
  EXPECT_EQ(http(a.http_port, "GET", "/admin/v1/users/alice/preference", "", "wrong").status, 401);
  EXPECT_EQ(http(a.http_port, "GET", "/admin/v1/users/alice/preference").status, 401);
  EXPECT_EQ(http(a.http_port, "GET", "/admin/v1/users/alice/preference", "", kToken).status, 404);
  EXPECT_EQ(http(a.http_port, "PUT", "/admin/v1/users/alice/preference", R"({"alpha": 0.5})", kToken).status, 400);
  EXPECT_EQ(http(a.http_port, "PUT", "/admin/v1/users/alice/preference", R"({"preference": "x", "alpha": 2})", kToken).status, 400);
  EXPECT_EQ(http(a.http_port, "PUT", "/admin/v1/users/alice/preference", "not json", kToken).status, 400);
  // Bad routes get errors, and the frontend keeps serving.
  EXPECT_EQ(http(a.http_port, "GET", "/admin/x", "", kToken).status, 404);
  EXPECT_EQ(http(a.http_port, "GET", "/admin/v1/users/", "", kToken).status, 404);
  EXPECT_EQ(http(a.http_port, "GET", "/admin/v1/users/alice/other", "", kToken).status, 404);
  EXPECT_EQ(http(a.http_port, "POST", "/admin/v1/users/alice/preference", "", kToken).status, 405);
  EXPECT_EQ(http(a.http_port, "GET", "/admin/v1/users/al%zzice/preference", "", kToken).status, 400);
  EXPECT_EQ(http(a.http_port, "GET", "/admin/v1/users/a%2Fb/preference", "", kToken).status, 404) << "a/b: no stored preference";
  EXPECT_EQ(http(a.http_port, "GET", "/health").status, 200);

  // Store alice's preference through A; it lives in the kvstore (L1 of node 1 and Redis).
  Reply put = http(a.http_port, "PUT", "/admin/v1/users/alice/preference",
                   json{{"preference", kPreference}, {"alpha", 0.7}}.dump(), kToken);
  ASSERT_EQ(put.status, 200) << put.body;
  Reply got = http(a.http_port, "GET", "/admin/v1/users/alice/preference", "", kToken);
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(json::parse(got.body)["preference"], kPreference);
  const std::string redis_keys_before = redis->command({"DBSIZE"});

  // Reference texts: no preference at all, and alice's preference given explicitly.
  const Completion plain = complete(a, {{"user", "nobody"}});
  ASSERT_EQ(plain.status, 200) << plain.raw;
  EXPECT_EQ(source_of(plain), "") << "no preference: usage has no preference";

  // 1. A computes alice's stored preference (the request names only the user).
  const Completion a1 = complete(a, {{"user", "alice"}});
  ASSERT_EQ(a1.status, 200) << a1.raw;
  EXPECT_EQ(source_of(a1), "compute") << a1.usage.dump();
  EXPECT_GT(a1.usage["preference"]["kv_bytes"].get<int64_t>(), 0);
  EXPECT_NE(a1.text, plain.text) << "the injected preference must change the greedy text for this test to mean anything";
  EXPECT_EQ(a.fe_metric("tessera_frontend_preference_requests_total", "source=\"compute\""), 1.0);
  EXPECT_EQ(a.fe_metric("tessera_frontend_stored_preference_used_total"), 1.0);
  // The worker stores the blob asynchronously: wait until Redis holds one more key (+ its index).
  ASSERT_TRUE(wait_until([&] { return redis->command({"DBSIZE"}) != redis_keys_before; }, milliseconds(10000)))
      << "the computed preference K/V never reached Redis";

  // 2. B (never computed it; its kvstore node never saw it) serves alice from Redis.
  const Completion b1 = complete(b, {{"user", "alice"}});
  ASSERT_EQ(b1.status, 200) << b1.raw;
  EXPECT_EQ(source_of(b1), "redis") << b1.usage.dump();
  EXPECT_GT(b1.usage["preference"]["kv_bytes"].get<int64_t>(), 0);
  EXPECT_GT(b1.usage["preference"]["transfer_ms"].get<double>(), 0.0);
  EXPECT_EQ(b1.text, a1.text) << "zstd blob is exact: same greedy text as the computing cluster";
  std::cout << "[info] A usage " << a1.usage.dump() << "\n[info] B usage " << b1.usage.dump() << "\n";
  EXPECT_EQ(b.sched_metric("tessera_scheduler_preference_fills_total", "source=\"compute\""), 0.0);
  EXPECT_EQ(b.sched_metric("tessera_scheduler_preference_fills_total", "source=\"redis\""), 1.0);
  EXPECT_EQ(b.fe_metric("tessera_frontend_preference_requests_total", "source=\"redis\""), 1.0);
  EXPECT_GT(b.fe_metric("tessera_frontend_preference_kv_bytes_total", "source=\"redis\""), 0.0);
  // Again on B: from node 2's memory now (promoted from Redis), or from pages B's scheduler
  // kept under alice's namespace; never computed.
  const Completion b2 = complete(b, {{"user", "alice"}});
  EXPECT_TRUE(source_of(b2) == "kvstore" || source_of(b2) == "memory") << b2.usage.dump();
  EXPECT_EQ(b2.text, a1.text);
  // Streamed: the usage chunk (stream_options.include_usage, the last one) carries the preference too.
  {
    Reply sse = http(b.http_port, "POST", "/v1/completions",
                     json{{"user", "alice"}, {"prompt", "Tom"}, {"max_tokens", 24}, {"temperature", 0}, {"stream", true},
                          {"stream_options", {{"include_usage", true}}}}
                         .dump());
    ASSERT_EQ(sse.status, 200);
    const size_t at = sse.body.rfind("data: {");
    ASSERT_NE(at, std::string::npos) << sse.body;
    json last = json::parse(sse.body.substr(at + 6, sse.body.find('\n', at) - at - 6), nullptr, false);
    ASSERT_TRUE(last.is_object()) << sse.body;
    ASSERT_TRUE(last["usage"].contains("preference")) << last.dump();
    const std::string src = last["usage"]["preference"]["source"].get<std::string>();
    EXPECT_TRUE(src == "kvstore" || src == "memory") << last.dump();
  }

  // 3. alpha 0.05 (at or below 0.1) runs without injection: exactly the plain text.
  const Completion low = complete(a, {{"user", "alice"}, {"preference", kPreference}, {"preference_alpha", 0.05}});
  ASSERT_EQ(low.status, 200) << low.raw;
  EXPECT_EQ(low.text, plain.text);
  EXPECT_EQ(source_of(low), "");

  // 4. bob has no preference: he never gets alice's (plain text, no preference in usage); with
  //    alice's text as his own, his K/V is computed, never taken from alice's.
  const Completion bob = complete(b, {{"user", "bob"}});
  EXPECT_EQ(bob.text, plain.text);
  EXPECT_EQ(source_of(bob), "");
  const Completion bob_same = complete(b, {{"user", "bob"}, {"preference", kPreference}, {"preference_alpha", 0.7}});
  EXPECT_EQ(source_of(bob_same), "compute") << bob_same.usage.dump();

  // 5. Invalidate alice (through A, the admin-enabled frontend): kvstore L1 + Redis and A's
  //    scheduler pages. A's next request for alice computes again; B's kvstore lost the blob too
  //    (Redis and node 2's L1 through the kvstore's invalidation events).
  const Completion a2 = complete(a, {{"user", "alice"}});
  EXPECT_TRUE(source_of(a2) == "kvstore" || source_of(a2) == "memory") << "before invalidation: " << a2.usage.dump();
  Reply inv = http(a.http_port, "POST", "/admin/v1/users/alice/invalidate", "", kToken);
  ASSERT_EQ(inv.status, 200) << inv.body;
  EXPECT_GE(json::parse(inv.body)["kvstore"]["l2"].get<int64_t>(), 1) << inv.body;
  const Completion a3 = complete(a, {{"user", "alice"}});
  EXPECT_EQ(source_of(a3), "compute") << a3.usage.dump();
  EXPECT_EQ(a3.text, a1.text);
  // The stored preference survived the invalidation.
  EXPECT_EQ(http(a.http_port, "GET", "/admin/v1/users/alice/preference", "", kToken).status, 200);
  Reply del = http(a.http_port, "DELETE", "/admin/v1/users/alice/preference", "", kToken);
  EXPECT_EQ(del.status, 200) << del.body;
  EXPECT_EQ(http(a.http_port, "GET", "/admin/v1/users/alice/preference", "", kToken).status, 404);
  const Completion a4 = complete(a, {{"user", "alice"}});
  EXPECT_EQ(source_of(a4), "") << "no stored preference any more";
  EXPECT_EQ(a4.text, plain.text);

  // 6. Pages held by the scheduler ("memory"): with a prompt long enough that whole cached pages
  //    cover the preference, carol's second request reuses A's pages. Invalidation must stop
  //    that too (the scheduler's namespace epoch), not only clear the kvstore.
  const std::string long_prompt = "Tom and his dog went to the park. They played with a big red ball all day long.";
  const json carol = {{"user", "carol"}, {"preference", kPreference}, {"preference_alpha", 0.5}};
  const Completion c1 = complete(a, carol, long_prompt);
  EXPECT_EQ(source_of(c1), "compute") << c1.usage.dump();
  const Completion c2 = complete(a, carol, long_prompt);
  EXPECT_EQ(source_of(c2), "memory") << c2.usage.dump();
  EXPECT_EQ(c2.text, c1.text);
  ASSERT_EQ(http(a.http_port, "POST", "/admin/v1/users/carol/invalidate", "", kToken).status, 200);
  const Completion c3 = complete(a, carol, long_prompt);
  EXPECT_EQ(source_of(c3), "compute") << "invalidated: neither scheduler pages nor kvstore: " << c3.usage.dump();
  EXPECT_EQ(c3.text, c1.text);
}

}  // namespace
}  // namespace tessera::preference_test
