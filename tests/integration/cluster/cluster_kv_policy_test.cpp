// StreamingLLM and H2O end to end (docs/kv.md, docs/api.md "K/V policies"): real scheduler,
// worker and frontend on stories260K (context 512) with a small pool of 40 pages (640
// positions). Three concurrent streaming requests of 1200 tokens each (full attention would need
// 225 pages) complete whole, past the context, with pages evicted and returned to the pool; an
// H2O request completes within its budget; malformed policies are refused with 400 naming
// kv_policy, and full attention past the context is still refused.
#include <future>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/testing/cluster.h"
#include "tessera/testing/wait.h"

namespace tessera::testing::cluster_kv_policy_test {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class ClusterKvPolicyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.num_pages = 40;
    cluster_ = new Cluster(o);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_ && cluster_->ok()) << "the cluster did not come up"; }
  static inline Cluster* cluster_ = nullptr;

  static json post(const json& body, int want_status) {
    auto r = cluster_->post("/v1/completions", body.dump(), 120000);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
    if (!r.ok()) return json();
    EXPECT_EQ(r->status, want_status) << r->body << "\n" << cluster_->logs();
    json j = json::parse(r->body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r->body;
    return j;
  }
  static json completion(int max_tokens, const json& policy) {
    json b = {{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
    if (!policy.is_null()) b["kv_policy"] = policy;
    return b;
  }
  double metric(const std::string& name, const std::string& labels = "") const {
    return cluster_->metric(cluster_->metrics_port(), name, labels);
  }
};

TEST_F(ClusterKvPolicyTest, StreamingGeneratesPastTheContextInASmallPool) {
  const json policy = {{"type", "streaming"}, {"sinks", 4}, {"window", 60}};
  std::vector<std::future<json>> answers;
  for (int i = 0; i < 3; ++i) {
    answers.push_back(std::async(std::launch::async, [&] { return post(completion(1200, policy), 200); }));
  }
  for (auto& a : answers) {
    const json j = a.get();
    ASSERT_TRUE(j.contains("choices")) << j.dump();
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["completion_tokens"], 1200);
    EXPECT_GT(j["choices"][0]["text"].get<std::string>().size(), 1000u);
  }
  // Every request dropped all but at most sinks + window of its 1200+ positions.
  // (The scheduler publishes its counters on its tick: wait for the last one.)
  EXPECT_TRUE(wait_until([&] { return metric("tessera_scheduler_kv_evicted_tokens_total") >= 3 * (1200 - 64); }, 10s))
      << metric("tessera_scheduler_kv_evicted_tokens_total");
  EXPECT_GT(metric("tessera_scheduler_kv_compactions_total"), 3 * 50);
  EXPECT_TRUE(wait_until([&] { return metric("tessera_scheduler_pages", "state=\"held\"") == 0; }, 10s))
      << "pages still held after the requests ended";
  EXPECT_EQ(metric("tessera_scheduler_preemptions_total"), 0);
}

TEST_F(ClusterKvPolicyTest, H2oCompletesWithinItsBudget) {
  const json j = post(completion(300, {{"type", "h2o"}, {"budget", 64}, {"recent", 32}}), 200);
  ASSERT_TRUE(j.contains("choices")) << j.dump();
  EXPECT_EQ(j["usage"]["completion_tokens"], 300);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

TEST_F(ClusterKvPolicyTest, BadPoliciesAreRefusedNamingTheField) {
  auto refused = [&](const json& policy, const std::string& fragment) {
    const json j = post(completion(8, policy), 400);
    EXPECT_EQ(j["error"]["param"], "kv_policy") << j.dump();
    EXPECT_NE(j["error"]["message"].get<std::string>().find(fragment), std::string::npos) << j.dump();
  };
  refused({{"type", "streaming"}, {"window", 0}}, "kv_policy.window must be >= 1");
  refused({{"type", "streaming"}}, "kv_policy.window is required");
  refused({{"type", "lru"}}, "kv_policy.type must be");
  refused({{"type", "h2o"}, {"budget", 64}, {"recent", 64}}, "kv_policy.recent must be in [0, budget)");
  refused({{"type", "h2o"}, {"budget", 64}, {"sinks", 4}}, "kv_policy.sinks is not a field of kv_policy type h2o");
  // The context bound, known once the scheduler told the frontend: 400 as well.
  const json big = post(completion(8, {{"type", "streaming"}, {"sinks", 4}, {"window", 600}}), 400);
  EXPECT_NE(big["error"]["message"].get<std::string>().find("must be <= the context (512)"), std::string::npos) << big.dump();
  // Full attention past the context stays refused.
  const json full = post(completion(1200, nullptr), 400);
  EXPECT_EQ(full["error"]["code"], "context_length_exceeded") << full.dump();
}

}  // namespace
}  // namespace tessera::testing::cluster_kv_policy_test

namespace tessera::testing::cluster_kv_policy_test {
namespace {

// The per-model default (--kv-policy on the frontend): requests without the field stream past
// the context; a request's own {"type": "none"} opts out (and is then bound by the context).
TEST(ClusterKvPolicyDefault, FrontendOptionAppliesToRequestsWithoutTheField) {
  ClusterOptions o;
  o.num_pages = 40;
  o.frontend_args = {"--kv-policy", "streaming:4:60"};
  Cluster c(o);
  ASSERT_TRUE(c.ok());
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 900}, {"temperature", 0}, {"ignore_eos", true}};
  auto r = c.post("/v1/completions", body.dump(), 120000);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->status, 200) << r->body << c.logs();
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 900);
  json none = body;
  none["kv_policy"] = {{"type", "none"}};
  auto refused = c.post("/v1/completions", none.dump());
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->status, 400) << refused->body;
  EXPECT_NE(refused->body.find("context_length_exceeded"), std::string::npos) << refused->body;
}

}  // namespace
}  // namespace tessera::testing::cluster_kv_policy_test
