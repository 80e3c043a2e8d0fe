// CacheBlend end to end (docs/api.md "Reusable documents", docs/kv.md "CacheBlend"): real
// scheduler, worker and frontend on loopback with stories260K. Documents sent in one order fill
// the worker's chunk cache; the same documents in another order reuse every one of them (usage
// reused_tokens, the worker's hit counter) and the greedy answer agrees with a full prefill of
// that prompt (recompute_ratio 1 in a namespace of its own), also when the prompt is longer than a
// step's token budget (blended over several steps); bad input is a 400 naming the field and the
// cluster keeps serving.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tessera/http/client.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/wait.h"

namespace tessera::testing::cluster_test {
namespace {

using json = nlohmann::json;

const std::vector<std::string> kDocs = {
    "Tom had a red ball. He liked to play with it in the park every day.",
    "Lily found a little cat under a tree. The cat was sad and hungry.",
    "The sun was big and warm. Birds sang songs in the blue sky.",
    "Ben and Sue went to the beach. They built a big sand castle.",
};
constexpr const char* kQuestion = "Once upon a time, there was a little girl named";

json complete(Cluster& c, const json& body, int expect_status = 200) {
  auto r = http::request({.port = c.http_port(), .method = "POST", .path = "/v1/completions", .body = body.dump(),
                          .timeout_ms = 30000});
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  if (!r.ok()) return json{};
  EXPECT_EQ(r->status, expect_status) << r->body;
  return json::parse(r->body, nullptr, false);
}

json ask(const std::vector<int>& order, std::optional<float> ratio = std::nullopt, const std::string& salt = "") {
  json docs = json::array();
  for (int i : order) docs.push_back(kDocs[static_cast<size_t>(i)]);
  json b = {{"prompt", kQuestion}, {"documents", docs}, {"max_tokens", 12}, {"temperature", 0}};
  if (ratio) b["recompute_ratio"] = *ratio;
  if (!salt.empty()) b["cache_salt"] = salt;
  return b;
}

int64_t reused(const json& j) { return j["usage"]["prompt_tokens_details"].value("reused_tokens", 0); }

TEST(ClusterBlend, ReorderedDocumentsReuseTheirKvAndAgreeWithAFullPrefill) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok()) << "cluster did not start";
  const std::string ready = cluster.worker().wait_line("READY", std::chrono::milliseconds(5000));
  const int wp = std::atoi(line_field(ready, "metrics").c_str());
  ASSERT_GT(wp, 0) << ready;

  const json cold = complete(cluster, ask({0, 1, 2, 3}));
  EXPECT_EQ(reused(cold), 0) << "a cold chunk cache: every document computed" << cold.dump();
  EXPECT_EQ(cluster.metric(wp, "tessera_worker_blend_chunks_total", "result=\"miss\""), 4.0);

  const json warm = complete(cluster, ask({2, 0, 3, 1}));
  const int64_t prompt = warm["usage"]["prompt_tokens"];
  EXPECT_GT(reused(warm), prompt / 2) << "the reordered documents come from the chunk cache: " << warm.dump();
  EXPECT_EQ(cluster.metric(wp, "tessera_worker_blend_chunks_total", "result=\"hit\""), 4.0);
  EXPECT_EQ(cluster.metric(wp, "tessera_worker_blend_reused_tokens_total"), static_cast<double>(reused(warm)));

  // The full prefill of the same prompt (ratio 1 = every token recomputed), in its own namespace.
  const json full = complete(cluster, ask({2, 0, 3, 1}, 1.0f, "reference"));
  EXPECT_EQ(reused(full), 0) << "another cache_salt shares no document K/V";
  EXPECT_EQ(full["usage"]["prompt_tokens"], prompt);
  const std::string a = warm["choices"][0]["text"], b = full["choices"][0]["text"];
  // Tolerance: the blended greedy answer starts like the full prefill's (first words), measured
  // identical on these documents (blend_test: 58 of 64 continuation tokens agree at 15 %).
  ASSERT_GE(b.size(), 8u) << b;
  EXPECT_EQ(a.substr(0, 8), b.substr(0, 8)) << "blended: " << a << "\nfull:    " << b;

  // Chat: the documents go before the last user message's content (after the template's header,
  // their anchor); asked again in another order, they are reused.
  auto ask_chat = [&](const json& docs) {
    const json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}}, {"documents", docs},
                       {"max_tokens", 4}, {"temperature", 0}};
    auto r = http::request({.port = cluster.http_port(), .method = "POST", .path = "/v1/chat/completions", .body = chat.dump(),
                            .timeout_ms = 30000});
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.ok() ? r->status : 0, 200) << (r.ok() ? r->body : "");
    return r.ok() ? json::parse(r->body, nullptr, false) : json{};
  };
  EXPECT_EQ(reused(ask_chat({kDocs[3], kDocs[1]})), 0);
  const json again = ask_chat({kDocs[1], kDocs[3]});
  EXPECT_GT(reused(again), 20) << again.dump();
}

// A prompt longer than a step's token budget (here 24 tokens: the ~71-token prompt takes 3 steps)
// is blended over several steps, each over the K/V the earlier ones left: the reordered documents
// are still reused, the answer agrees with the full prefill as above, and nothing falls back.
TEST(ClusterBlend, APromptLongerThanAStepsBudgetIsBlendedOverSeveralSteps) {
  Cluster cluster({.scheduler_args = {"--max-step-tokens", "24", "--max-running", "4"}});
  ASSERT_TRUE(cluster.ok()) << "cluster did not start";
  const std::string ready = cluster.worker().wait_line("READY", std::chrono::milliseconds(5000));
  const int wp = std::atoi(line_field(ready, "metrics").c_str());
  ASSERT_GT(wp, 0) << ready;

  const json cold = complete(cluster, ask({0, 1, 2, 3}));
  const int64_t prompt = cold["usage"]["prompt_tokens"];
  ASSERT_GT(prompt, 2 * 24) << "the prompt must need more than two steps";
  // One blended chunk per step that reaches a document (the scheduler publishes on its tick).
  auto blend_steps = [&] { return cluster.metric(cluster.metrics_port(), "tessera_scheduler_blend_steps_total"); };
  EXPECT_TRUE(wait_until([&] { return blend_steps() >= 3.0; }, std::chrono::seconds(5))) << blend_steps();
  const double steps = blend_steps();
  EXPECT_EQ(cluster.metric(wp, "tessera_worker_blend_chunks_total", "result=\"miss\""), 4.0) << "each document computed once";

  const json warm = complete(cluster, ask({2, 0, 3, 1}));
  EXPECT_EQ(warm["usage"]["prompt_tokens"], prompt);
  EXPECT_GT(reused(warm), prompt / 2) << "the reordered documents come from the chunk cache: " << warm.dump();
  EXPECT_EQ(cluster.metric(wp, "tessera_worker_blend_chunks_total", "result=\"hit\""), 4.0) << "each looked up once";
  EXPECT_TRUE(wait_until([&] { return blend_steps() >= 2 * steps; }, std::chrono::seconds(5))) << blend_steps();

  const json full = complete(cluster, ask({2, 0, 3, 1}, 1.0f, "reference"));
  EXPECT_EQ(reused(full), 0);
  const std::string a = warm["choices"][0]["text"], b = full["choices"][0]["text"];
  ASSERT_GE(b.size(), 8u) << b;
  EXPECT_EQ(a.substr(0, 8), b.substr(0, 8)) << "blended over steps: " << a << "\nfull:               " << b;
  EXPECT_EQ(cluster.metric(cluster.metrics_port(), "tessera_scheduler_blend_fallbacks_total"), 0.0);
}

TEST(ClusterBlend, BadDocumentsAre400NamingTheField) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok()) << "cluster did not start";
  auto expect_400 = [&](json body, const std::string& param) {
    const json j = complete(cluster, body, 400);
    EXPECT_EQ(j["error"]["param"], param) << j.dump();
  };
  json b = ask({0});
  b["documents"] = "not a list";
  expect_400(b, "documents");
  b["documents"] = json::array({1, 2});
  expect_400(b, "documents");
  b["documents"] = json::array({""});
  expect_400(b, "documents");
  b["documents"] = json::array();
  for (int i = 0; i < 65; ++i) b["documents"].push_back("doc");
  expect_400(b, "documents");
  b["documents"] = json::array({std::string(300 * 1024, 'a')});
  expect_400(b, "documents");
  expect_400(ask({0}, 1.5f), "recompute_ratio");
  expect_400(json{{"prompt", "Hi"}, {"recompute_ratio", 0.2}}, "recompute_ratio");
  // Still serving.
  const json ok = complete(cluster, ask({1, 0}));
  EXPECT_EQ(ok["usage"]["completion_tokens"], 12) << ok.dump();
}

}  // namespace
}  // namespace tessera::testing::cluster_test
