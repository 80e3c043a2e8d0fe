// Pinned prefixes over the real cluster (docs/api.md "Pinned prefixes"): the admin API pins a
// system prompt on every worker, it survives traffic that cycles the whole K/V pool, later
// requests reuse it, the listing and metrics say so, unpinning lets it age out, and bad calls
// get errors naming what is wrong.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tessera/http/client.h"
#include "tessera/testing/cluster.h"

namespace tessera::testing {
namespace {

using json = nlohmann::json;

constexpr int kPageSize = 16;

class PrefixPinTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.num_workers = 2;
    o.num_pages = 48;  // 768 tokens per worker: the flood below cycles it several times
    o.worker_args = {"--page-size", std::to_string(kPageSize)};
    o.scheduler_args = {"--max-pinned-pages", "12"};
    o.frontend_args = {"--admin-token", "sesame"};
    cluster_ = new Cluster(o);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_ && cluster_->ok()) << "the cluster did not come up"; }

  static Result<http::Response> admin(const std::string& method, const std::string& path, const std::string& body = "",
                                      const std::string& token = "sesame") {
    http::Request r{.port = cluster_->http_port(), .method = method, .path = path, .body = body, .timeout_ms = 30000};
    if (!token.empty()) r.headers.push_back({"Authorization", "Bearer " + token});
    return http::request(r);
  }
  static json parse(const http::Response& r) { return json::parse(r.body, nullptr, false); }

  static inline Cluster* cluster_ = nullptr;
};

const std::string kSystem =
    "Once upon a time there was a little girl named Lily who lived in a small house near the big forest with her mom and dad. "
    "Every day she went outside to play with her dog.";

TEST_F(PrefixPinTest, APinnedSystemPromptSurvivesAFloodAndIsReused) {
  Cluster& c = *cluster_;
  auto pinned = admin("POST", "/admin/v1/prefixes", json{{"prompt", kSystem}, {"workers", {"*"}}}.dump());
  ASSERT_TRUE(pinned.ok()) << pinned.error().to_string();
  ASSERT_EQ(pinned->status, 200) << pinned->body << "\n" << c.logs();
  const json p = parse(*pinned);
  const int prompt_tokens = p["prompt_tokens"].get<int>();
  ASSERT_GE(prompt_tokens, 2 * kPageSize) << "the system prompt should span at least two pages";
  const int pinned_tokens = prompt_tokens / kPageSize * kPageSize;
  ASSERT_EQ(p["workers"].size(), 2u) << p.dump();
  const std::string hash = p["workers"][0]["prefix"].get<std::string>();
  for (const auto& w : p["workers"]) {
    EXPECT_TRUE(w["pinned"].get<bool>()) << w.dump();
    EXPECT_EQ(w["tokens"].get<int>(), pinned_tokens);
    EXPECT_EQ(w["pages"].get<int>(), pinned_tokens / kPageSize);
    EXPECT_EQ(w["prefix"].get<std::string>(), hash) << "same tokens, same namespace: same block hash on every worker";
  }
  EXPECT_EQ(p["pinned_pages"].get<int>(), 2 * pinned_tokens / kPageSize);
  EXPECT_EQ(p["pin_budget_pages"].get<int>(), 24);
  const int mport = c.metrics_port();
  EXPECT_EQ(c.metric(mport, "tessera_scheduler_pinned_pages", "worker=\"w0\""), pinned_tokens / kPageSize);
  EXPECT_EQ(c.metric(mport, "tessera_scheduler_pinned_pages", "worker=\"w1\""), pinned_tokens / kPageSize);

  // A control prompt, cached but not pinned, then traffic that needs the whole pool several
  // times over (distinct prompts, nothing shared).
  const std::string control = "The old man and the cat walked to the shop to buy some milk and bread, and on the way "
                              "they met a friendly fox who wanted to play a game with them.";
  auto first = c.post("/v1/completions", json{{"prompt", control}, {"max_tokens", 1}}.dump());
  ASSERT_TRUE(first.ok() && first->status == 200);
  for (int i = 0; i < 30; ++i) {
    const std::string prompt = "Story number " + std::to_string(i) + ": a " + std::string(i % 2 ? "red" : "blue") +
                               " bird sang to the sun, and the tall tree with green leaves listened all day long near the river " +
                               std::to_string(i * 7919);
    auto r = c.post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 96}, {"ignore_eos", true}, {"temperature", 0}}.dump());
    ASSERT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.error().to_string());
  }
  auto control_again = c.post("/v1/completions", json{{"prompt", control}, {"max_tokens", 1}}.dump());
  ASSERT_TRUE(control_again.ok() && control_again->status == 200);
  EXPECT_EQ(parse(*control_again)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0)
      << "the flood should have evicted the unpinned control prompt: " << control_again->body;
  // A request that starts with the system prompt reuses every pinned page, wherever it lands.
  for (int i = 0; i < 2; ++i) {
    auto r = c.post("/v1/completions", json{{"prompt", kSystem + " Then " + std::to_string(i)}, {"max_tokens", 2}}.dump());
    ASSERT_TRUE(r.ok() && r->status == 200);
    EXPECT_GE(parse(*r)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), pinned_tokens) << r->body;
  }

  // The listing shows both pins; with a limit also cached prefixes with their hit counts.
  auto list = admin("GET", "/admin/v1/prefixes?limit=3");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->status, 200) << list->body;
  const json l = parse(*list);
  int pins = 0;
  for (const auto& e : l["data"]) {
    if (e["pinned"].get<bool>()) {
      ++pins;
      EXPECT_EQ(e["prefix"].get<std::string>(), hash);
    }
  }
  EXPECT_EQ(pins, 2) << l.dump();
  EXPECT_GT(l["data"].size(), 2u) << "limit=3 should add cached prefixes";

  // Unpin: both workers, the gauge back to 0; a second unpin finds nothing.
  auto un = admin("DELETE", "/admin/v1/prefixes/" + hash);
  ASSERT_TRUE(un.ok());
  ASSERT_EQ(un->status, 200) << un->body;
  EXPECT_EQ(parse(*un)["unpinned"].size(), 2u);
  EXPECT_EQ(parse(*un)["pinned_pages"].get<int>(), 0);
  EXPECT_EQ(c.metric(mport, "tessera_scheduler_pinned_pages", "worker=\"w0\""), 0);
  auto again = admin("DELETE", "/admin/v1/prefixes/" + hash);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->status, 404) << again->body;
  EXPECT_NE(again->body.find("no worker has prefix " + hash + " pinned"), std::string::npos) << again->body;
}

TEST_F(PrefixPinTest, BadCallsGetErrorsNamingTheProblem) {
  auto expect = [](const Result<http::Response>& r, int status, const std::string& needle) {
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_EQ(r->status, status) << r->body;
    EXPECT_NE(r->body.find(needle), std::string::npos) << "expected '" << needle << "' in " << r->body;
  };
  expect(admin("POST", "/admin/v1/prefixes", json{{"prompt", kSystem}}.dump(), ""), 401, "admin token");
  expect(admin("POST", "/admin/v1/prefixes", "{not json"), 400, "JSON object");
  expect(admin("POST", "/admin/v1/prefixes", json{{"prompt", "a"}, {"tokens", {1, 2}}}.dump()), 400, "exactly one of");
  expect(admin("POST", "/admin/v1/prefixes", json{{"tokens", {1, -2}}}.dump()), 400, "non-negative integer token ids");
  expect(admin("POST", "/admin/v1/prefixes", json{{"tokens", {1, 100000}}}.dump()), 400, "outside the vocabulary");
  expect(admin("POST", "/admin/v1/prefixes", json{{"prompt", kSystem}, {"workers", "w0"}}.dump()), 400, "workers must be an array");
  expect(admin("POST", "/admin/v1/prefixes", json{{"prompt", "Once"}}.dump()), 409, "at least one whole page");
  expect(admin("POST", "/admin/v1/prefixes", json{{"prompt", kSystem}, {"workers", {"nobody"}}}.dump()), 409, "no live worker 'nobody'");
  // Over the budget (12 pages per worker): a prompt of more pages than that cannot be pinned.
  std::string longer;
  for (int i = 0; i < 6; ++i) longer += kSystem + " ";
  expect(admin("POST", "/admin/v1/prefixes", json{{"prompt", longer}, {"workers", {"w0"}}}.dump()), 409, "pin budget");
  expect(admin("GET", "/admin/v1/prefixes?limit=abc"), 400, "limit must be an integer");
  expect(admin("GET", "/admin/v1/prefixes?color=red"), 400, "unknown query parameter");
  expect(admin("DELETE", "/admin/v1/prefixes/xyz"), 400, "16 hex digits");
  expect(admin("PUT", "/admin/v1/prefixes"), 405, "not allowed");
  // Nothing above left a pin behind.
  auto list = admin("GET", "/admin/v1/prefixes");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(parse(*list)["pinned_pages"].get<int>(), 0) << list->body;
}

}  // namespace
}  // namespace tessera::testing
