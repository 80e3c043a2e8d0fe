#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tessera/frontend/openai.h"

namespace tessera::frontend {
namespace {

using protocol::RequestKind;
using json = nlohmann::json;

struct Outcome {
  bool ok;
  ErrorCode code;
  std::string param;
  std::string message;
  ParsedRequest req;
};

Outcome parse(const std::string& body, RequestKind kind = RequestKind::kCompletion) {
  std::string param;
  auto r = parse_request(body, kind, ParseOptions{.default_max_tokens = 99}, &param);
  if (r.ok()) return {true, ErrorCode::kOk, "", "", *r};
  return {false, r.error().code, param, r.error().message, {}};
}

TEST(OpenAIParse, FullCompletionRequest) {
  Outcome o = parse(R"({"model":"m","prompt":"Once","max_tokens":5,"temperature":0,"top_p":0.5,"top_k":3,"min_p":0.1,
    "stop":["\n","x"],"seed":7,"logprobs":2,"presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.2,
    "user":"u","preference":"p","preference_alpha":0.3,"priority":4,"stream":true,"unknown_field":{"a":1}})");
  ASSERT_TRUE(o.ok) << o.message;
  const auto& r = o.req.request;
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "Once");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "x"}));
  EXPECT_EQ(r.sampling.seed, 7u);
  EXPECT_TRUE(o.req.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 2);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.2f);
  EXPECT_EQ(r.user, "u");
  EXPECT_EQ(r.preference, "p");
  EXPECT_FLOAT_EQ(r.preference_alpha, 0.3f);
  EXPECT_EQ(r.priority, 4);
  EXPECT_TRUE(r.stream);
}

TEST(OpenAIParse, DefaultsAndTokenPrompt) {
  Outcome o = parse(R"({"prompt":[1, 2, 3]})");
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(o.req.request.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(o.req.request.max_tokens, 99);
  EXPECT_FALSE(o.req.request.stream);
  EXPECT_FALSE(o.req.logprobs);
  Outcome s = parse(R"({"prompt":"x","stop":"END"})");
  ASSERT_TRUE(s.ok);
  EXPECT_EQ(s.req.request.stop, std::vector<std::string>{"END"});
}

TEST(OpenAIParse, Chat) {
  Outcome o = parse(R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
    "logprobs":true,"top_logprobs":3,"max_completion_tokens":7})", RequestKind::kChat);
  ASSERT_TRUE(o.ok) << o.message;
  ASSERT_EQ(o.req.request.messages.size(), 2u);
  EXPECT_EQ(o.req.request.messages[1].content, "ab");
  EXPECT_EQ(o.req.request.sampling.top_logprobs, 3);
  EXPECT_TRUE(o.req.logprobs);
  EXPECT_EQ(o.req.request.max_tokens, 7);
}

TEST(OpenAIParse, BadInputNamesTheParam) {
  struct Case {
    std::string body;
    ErrorCode code;
    std::string param;
    RequestKind kind = RequestKind::kCompletion;
  };
  const std::vector<Case> cases = {
      {"{not json", ErrorCode::kMalformedMessage, ""},
      {"[1,2]", ErrorCode::kInvalidArgument, ""},
      {R"({"max_tokens":5})", ErrorCode::kInvalidArgument, "prompt"},
      {R"({"prompt":5})", ErrorCode::kInvalidArgument, "prompt"},
      {R"({"prompt":[1,"a"]})", ErrorCode::kInvalidArgument, "prompt"},
      {R"({"prompt":[-1]})", ErrorCode::kOutOfRange, "prompt"},
      {R"({"prompt":[[1],["a"]]})", ErrorCode::kInvalidArgument, "prompt"},
      {R"({"prompt":"x","max_tokens":"10"})", ErrorCode::kInvalidArgument, "max_tokens"},
      {R"({"prompt":"x","max_tokens":1.5})", ErrorCode::kInvalidArgument, "max_tokens"},
      {R"({"prompt":"x","max_tokens":-3})", ErrorCode::kOutOfRange, "max_tokens"},
      {R"({"prompt":"x","max_tokens":0})", ErrorCode::kOutOfRange, "max_tokens"},
      {R"({"prompt":"x","max_tokens":99999999999})", ErrorCode::kOutOfRange, "max_tokens"},
      {R"({"prompt":"x","temperature":"hot"})", ErrorCode::kInvalidArgument, "temperature"},
      {R"({"prompt":"x","temperature":3})", ErrorCode::kOutOfRange, "temperature"},
      {R"({"prompt":"x","top_p":0})", ErrorCode::kOutOfRange, "top_p"},
      {R"({"prompt":"x","top_k":-1})", ErrorCode::kOutOfRange, "top_k"},
      {R"({"prompt":"x","stream":"yes"})", ErrorCode::kInvalidArgument, "stream"},
      {R"({"prompt":"x","stop":[1]})", ErrorCode::kInvalidArgument, "stop"},
      {R"({"prompt":"x","logprobs":21})", ErrorCode::kOutOfRange, "top_logprobs"},
      {R"({"prompt":"x","n":20})", ErrorCode::kOutOfRange, "n"},
      {R"({"prompt":"x","model":7})", ErrorCode::kInvalidArgument, "model"},
      {R"({"prompt":"x","seed":-1})", ErrorCode::kOutOfRange, "seed"},
      {R"({"messages":"hi"})", ErrorCode::kInvalidArgument, "messages", RequestKind::kChat},
      {R"({"messages":[]})", ErrorCode::kInvalidArgument, "messages", RequestKind::kChat},
      {R"({"messages":[{"content":"x"}]})", ErrorCode::kInvalidArgument, "messages[0].role", RequestKind::kChat},
      {R"({"messages":[{"role":"bot","content":"x"}]})", ErrorCode::kInvalidArgument, "messages", RequestKind::kChat},
      {R"({"messages":[{"role":"user","content":5}]})", ErrorCode::kInvalidArgument, "messages[0].content", RequestKind::kChat},
  };
  for (const auto& c : cases) {
    Outcome o = parse(c.body, c.kind);
    ASSERT_FALSE(o.ok) << c.body;
    EXPECT_EQ(o.code, c.code) << c.body << ": " << o.message;
    EXPECT_EQ(o.param, c.param) << c.body << ": " << o.message;
    EXPECT_FALSE(o.message.empty());
  }
}

TEST(OpenAIJson, ErrorBodyAndStatus) {
  json j = json::parse(error_json(make_error(ErrorCode::kOutOfRange, "max_tokens must be >= 1 (got 0)"), "max_tokens"));
  EXPECT_EQ(j["error"]["message"], "max_tokens must be >= 1 (got 0)");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "max_tokens");
  EXPECT_EQ(j["error"]["code"], "out_of_range");
  EXPECT_TRUE(json::parse(error_json(make_error(ErrorCode::kNotFound, "x")))["error"]["param"].is_null());
  EXPECT_EQ(http_status(ErrorCode::kMalformedMessage), 400);
  EXPECT_EQ(http_status(ErrorCode::kNotFound), 404);
  EXPECT_EQ(http_status(ErrorCode::kTooLarge), 413);
  EXPECT_EQ(http_status(ErrorCode::kOverloaded), 429);
  EXPECT_EQ(http_status(ErrorCode::kUnavailable), 503);
  EXPECT_EQ(http_status(ErrorCode::kPeerDead), 503);
  EXPECT_EQ(http_status(ErrorCode::kInternal), 500);
}

TEST(OpenAIJson, ResponsesAndChunks) {
  protocol::FinalEvent f{.id = 1, .finish_reason = "length", .usage = {.prompt_tokens = 4, .completion_tokens = 2, .cached_tokens = 3},
                         .timings = {.ttft_ms = 1.5}};
  ResponseMeta meta{.kind = RequestKind::kCompletion, .id = "cmpl-1", .model = "m", .created = 42, .logprobs = true};
  json r = json::parse(response_json(meta, "hi", {{"h", -0.5f, {{"h", -0.5f}, {"x", -2.0f}}}}, f, "length"));
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], "hi");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"][0], "h");
  EXPECT_EQ(r["choices"][0]["logprobs"]["top_logprobs"][0]["x"], -2.0);
  EXPECT_EQ(r["usage"]["total_tokens"], 6);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  EXPECT_EQ(r["timings"]["ttft_ms"], 1.5);

  meta.kind = RequestKind::kChat;
  meta.logprobs = false;
  std::string chunk = stream_chunk(meta, "he", {}, true, "", nullptr);
  ASSERT_EQ(chunk.rfind("data: ", 0), 0u);
  ASSERT_EQ(chunk.substr(chunk.size() - 2), "\n\n");
  json c = json::parse(chunk.substr(6));
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(c["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(c["choices"][0]["delta"]["content"], "he");
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  json last = json::parse(stream_chunk(meta, "", {}, false, "stop", &f).substr(6));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["usage"]["completion_tokens"], 2);
  json models = json::parse(models_json("m", 42));
  EXPECT_EQ(models["data"][0]["id"], "m");
  EXPECT_FALSE(r["usage"].contains("preference")) << "no preference injected: no usage.preference";
}

TEST(OpenAIJson, UsageCarriesPreferenceProvenance) {
  protocol::FinalEvent f{.id = 1,
                         .usage = {.prompt_tokens = 4, .completion_tokens = 2, .preference_source = "kvstore",
                                   .preference_kv_bytes = 21703, .preference_transfer_ms = 0.5}};
  ResponseMeta meta{.kind = RequestKind::kCompletion, .id = "cmpl-1", .model = "m", .created = 42};
  for (const json& usage : {json::parse(response_json(meta, "x", {}, f, "stop"))["usage"],
                            json::parse(stream_chunk(meta, "", {}, false, "stop", &f).substr(6))["usage"]}) {
    ASSERT_TRUE(usage.contains("preference")) << usage.dump();
    EXPECT_EQ(usage["preference"]["source"], "kvstore");
    EXPECT_EQ(usage["preference"]["kv_bytes"], 21703);
    EXPECT_EQ(usage["preference"]["transfer_ms"], 0.5);
    EXPECT_EQ(usage["total_tokens"], 6);
  }
}

}  // namespace
}  // namespace tessera::frontend
