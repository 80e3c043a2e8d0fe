// Tool calls over the OpenAI API against a real cluster (stories260K, whose template-less
// tokenizer gets the Hermes fallback block; docs/api.md "Tool calls"). The model knows nothing
// of tools, so tool_choice named / required force the call through the grammar: every call must
// parse, name a declared tool and carry arguments valid for it. Also: streaming, the round trip
// (the call and the tool's answer sent back), auto on a model that never calls, and refusals.
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/testing/cluster.h"
#include "tessera/testing/paths.h"

namespace tessera::testing::cluster_tools_test {
namespace {

using nlohmann::json;

// Small tools: stories260K's 512-token vocabulary spends about a token per character of JSON,
// and its context is 512 tokens.
const json kPick = json::parse(R"({"type":"function","function":{"name":"pick",
    "parameters":{"type":"object","properties":{"color":{"enum":["red","blue"]},"loud":{"type":"boolean"}},
    "required":["color","loud"]}}})");
const json kHop = json::parse(R"({"type":"function","function":{"name":"hop"}})");

// The worker needs the vocabulary to constrain sampling (stories260K.bin embeds none).
class ClusterToolsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.worker_args = {"--tokenizer", shared_path("models/stories260K/tok512.bin")};
    o.max_prompt_tokens = 500;
    cluster_ = new Cluster(o);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_ && cluster_->ok()) << "the cluster did not come up"; }
  static inline Cluster* cluster_ = nullptr;

  json post(const json& body, int want_status = 200) {
    auto r = cluster_->post("/v1/chat/completions", body.dump());
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
    if (!r.ok()) return json();
    EXPECT_EQ(r->status, want_status) << r->body << "\n" << cluster_->logs();
    json j = json::parse(r->body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r->body;
    return j;
  }
  static json chat(const std::string& user) { return {{"messages", json::array({{{"role", "user"}, {"content", user}}})}, {"max_tokens", 96}}; }
};

// A forced call: content null, finish_reason tool_calls, an OpenAI-shaped call whose arguments
// (a JSON string) are valid for the tool's schema; for every seed.
TEST_F(ClusterToolsTest, NamedToolChoiceAlwaysGivesAValidCall) {
  std::set<std::string> ids;
  for (int seed = 1; seed <= 8; ++seed) {
    json body = chat("A girl liked colors.");
    body["tools"] = json::array({kPick});
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "pick"}}}};
    body["seed"] = seed;
    body["temperature"] = 1.0;
    const json r = post(body);
    ASSERT_TRUE(r.contains("choices")) << r;
    const json& c = r["choices"][0];
    EXPECT_EQ(c["finish_reason"], "tool_calls") << r;
    EXPECT_TRUE(c["message"]["content"].is_null()) << r;
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r;
    const json& call = c["message"]["tool_calls"][0];
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["function"]["name"], "pick");
    const std::string id = call["id"].get<std::string>();
    EXPECT_EQ(id.rfind("call_", 0), 0u);
    EXPECT_TRUE(ids.insert(id).second) << "call ids repeat: " << id;
    const json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(args.is_object()) << call;
    EXPECT_EQ(args.size(), 2u) << args;
    EXPECT_TRUE(args["color"] == "red" || args["color"] == "blue") << args;
    EXPECT_TRUE(args["loud"].is_boolean()) << args;
  }
}

TEST_F(ClusterToolsTest, RequiredPicksADeclaredTool) {
  for (int seed = 1; seed <= 4; ++seed) {
    json body = chat("The dog ran to the park.");
    body["tools"] = json::array({kPick, kHop});
    body["tool_choice"] = "required";
    body["seed"] = seed;
    const json r = post(body);
    const json& call = r["choices"][0]["message"]["tool_calls"][0];
    EXPECT_TRUE(call["function"]["name"] == "pick" || call["function"]["name"] == "hop") << r;
    const json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
    EXPECT_TRUE(args.is_object()) << r;
    EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
    // The arguments are valid for the tool called (checked, else generated again with it named).
    if (call["function"]["name"] == "pick") {
      EXPECT_TRUE(args.value("color", "") == "red" || args.value("color", "") == "blue") << args;
      EXPECT_TRUE(args.contains("loud") && args["loud"].is_boolean()) << args;
    }  // hop declares no parameters: any object
  }
}

// required over several tools whose parameters a free object almost never satisfies (stories260K
// knows nothing of them): the call is checked and generated again with the tool named, so every
// answer is a valid call (the frontend logs each second generation).
TEST_F(ClusterToolsTest, RequiredWithSeveralToolsAlwaysGivesValidArguments) {
  // Small tools: two of them fill most of the 512-token context (about a token per character).
  const json a = json::parse(R"({"type":"function","function":{"name":"a",
      "parameters":{"type":"object","properties":{"c":{"enum":["r","b"]}},"required":["c"]}}})");
  json b = a;
  b["function"]["name"] = "b";
  for (int seed = 1; seed <= 3; ++seed) {
    json body = chat("A bird sang.");
    body["tools"] = json::array({a, b});
    body["tool_choice"] = "required";
    body["seed"] = seed;
    body["max_tokens"] = 48;
    const json r = post(body);
    ASSERT_TRUE(r.contains("choices")) << r;
    ASSERT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r;
    const json& call = r["choices"][0]["message"]["tool_calls"][0];
    const json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
    EXPECT_TRUE(args.is_object() && args.size() == 1 && (args.value("c", "") == "r" || args.value("c", "") == "b")) << r;
  }
  EXPECT_NE(cluster_->logs().find("generating it again with the tool named"), std::string::npos)
      << "no call was generated again: the check was not exercised";
}

// Streamed (a forced call): the role with the call's id, type and name, then its arguments in
// pieces (index 0, no id or name again), the last chunk with finish_reason tool_calls, [DONE];
// no content deltas; the pieces concatenate to the non-streamed arguments of the same seed.
TEST_F(ClusterToolsTest, StreamedCallArgumentsArriveInPieces) {
  json body = chat("Tim had a red ball.");
  body["tools"] = json::array({kPick});
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "pick"}}}};
  body["stream"] = true;
  body["seed"] = 3;
  std::vector<json> chunks;
  bool done = false;
  http::SseParser sse;
  auto r = http::request({.port = cluster_->http_port(), .method = "POST", .path = "/v1/chat/completions", .body = body.dump(),
                          .timeout_ms = 60000, .on_body = [&](std::string_view b) {
                            sse.feed(b, [&](const std::string& d) {
                              if (d == "[DONE]") done = true;
                              else chunks.push_back(json::parse(d));
                            });
                            return true;
                          }});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(done);
  ASSERT_GE(chunks.size(), 3u) << "the arguments of a forced call are streamed as they are generated";
  const json& first = chunks[0]["choices"][0];
  EXPECT_EQ(first["delta"]["role"], "assistant");
  const json& head = first["delta"]["tool_calls"][0];
  EXPECT_EQ(head["index"], 0);
  EXPECT_EQ(head["type"], "function");
  EXPECT_EQ(head["function"]["name"], "pick");
  EXPECT_EQ(head["id"].get<std::string>().rfind("call_", 0), 0u);
  std::string arguments;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const json& c = chunks[i]["choices"][0];
    EXPECT_FALSE(c["delta"].contains("content")) << c;
    ASSERT_EQ(c["delta"]["tool_calls"].size(), 1u) << c;
    const json& call = c["delta"]["tool_calls"][0];
    EXPECT_EQ(call["index"], 0);
    if (i > 0) {
      EXPECT_FALSE(call.contains("id") || call["function"].contains("name")) << c;
    }
    arguments += call["function"]["arguments"].get<std::string>();
    EXPECT_EQ(c["finish_reason"], i + 1 == chunks.size() ? json("tool_calls") : json(nullptr)) << c;
  }
  // The same seed without streaming gives the same arguments.
  body.erase("stream");
  const json whole = post(body);
  EXPECT_EQ(whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], arguments);
}

// The round trip: the call and the tool's result go back (assistant tool_calls, role tool,
// developer role); the answer is ordinary text. auto on this model: plain content, no call.
TEST_F(ClusterToolsTest, RoundTripAndAuto) {
  json first = chat("Lily saw a big tree.");
  first["tools"] = json::array({kPick});
  first["tool_choice"] = {{"type", "function"}, {"function", {{"name", "pick"}}}};
  first["seed"] = 5;
  const json r1 = post(first);
  const json call = r1["choices"][0]["message"]["tool_calls"][0];
  json second = first;
  second.erase("tool_choice");
  second["max_tokens"] = 16;  // the history fills most of the 512-token context
  second["messages"] = json::array({{{"role", "developer"}, {"content", "Be kind."}},
                                    {{"role", "user"}, {"content", "Lily saw a big tree."}},
                                    {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}},
                                    {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "red"}}});
  const json r2 = post(second);
  const json& c = r2["choices"][0];
  EXPECT_TRUE(c["message"]["content"].is_string()) << r2;
  EXPECT_FALSE(c["message"].contains("tool_calls")) << r2;
  EXPECT_TRUE(c["finish_reason"] == "stop" || c["finish_reason"] == "length") << r2;
  // tool_choice none: the same, as plain text.
  second["tool_choice"] = "none";
  EXPECT_TRUE(post(second)["choices"][0]["message"]["content"].is_string());
}

TEST_F(ClusterToolsTest, RefusalsNameTheField) {
  json body = chat("x");
  body["tools"] = json::array({kPick});
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "nope"}}}};
  EXPECT_EQ(post(body, 400)["error"]["param"], "tool_choice");
  body["tool_choice"] = "auto";
  body["messages"].push_back({{"role", "tool"}, {"content", "x"}});
  EXPECT_EQ(post(body, 400)["error"]["param"], "messages[1].tool_call_id");
  // The cluster still serves.
  EXPECT_TRUE(post(chat("Hello"))["choices"][0]["message"]["content"].is_string());
}

}  // namespace
}  // namespace tessera::testing::cluster_tools_test
