// Every field of OpenAI's completions and chat-completions request schemas (the API reference,
// 2025) is honoured or refused with an error naming it (issue #11: nothing silently ignored).
// "Honoured" fields are checked for their effect on the parsed request.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "tessera/frontend/openai.h"

namespace tessera::frontend {
namespace {

using protocol::RequestKind;
using json = nlohmann::json;

struct Field {
  std::string name;
  json value;  // a value that asks for the feature
  // Honoured: checks the parsed request. Empty: refused (400) naming the field.
  std::function<void(const ParsedRequest&)> honoured;
};

void check(RequestKind kind, const json& base, const std::vector<Field>& fields) {
  for (const auto& f : fields) {
    SCOPED_TRACE(f.name);
    json body = base;
    body[f.name] = f.value;
    std::string param;
    auto r = parse_request(body.dump(), kind, {}, &param);
    if (f.honoured) {
      ASSERT_TRUE(r.ok()) << r.error().to_string();
      f.honoured(*r);
    } else {
      ASSERT_FALSE(r.ok()) << "silently accepted";
      EXPECT_EQ(http_status(r.error().code), 400);
      EXPECT_EQ(param, f.name) << r.error().message;
      EXPECT_NE(r.error().message.find(f.name), std::string::npos) << r.error().message;
    }
  }
}

// Shared by both schemas.
std::vector<Field> common_fields() {
  return {
      {"frequency_penalty", 0.5, [](const ParsedRequest& p) { EXPECT_EQ(p.request.sampling.frequency_penalty, 0.5f); }},
      {"presence_penalty", -0.5, [](const ParsedRequest& p) { EXPECT_EQ(p.request.sampling.presence_penalty, -0.5f); }},
      {"logit_bias", json{{"7", 5}, {"9", -100}},
       [](const ParsedRequest& p) {
         ASSERT_EQ(p.request.sampling.logit_bias.size(), 2u);
         EXPECT_EQ(p.request.sampling.logit_bias[0], std::make_pair(int32_t{7}, 5.0f));
       }},
      {"max_tokens", 7, [](const ParsedRequest& p) { EXPECT_EQ(p.request.max_tokens, 7); EXPECT_TRUE(p.max_tokens_given); }},
      {"n", 2, [](const ParsedRequest& p) { EXPECT_EQ(p.n, 2); EXPECT_EQ(p.best_of, 2); }},
      {"seed", 42, [](const ParsedRequest& p) { EXPECT_EQ(p.request.sampling.seed, 42u); EXPECT_TRUE(p.seed_given); }},
      {"stop", "x", [](const ParsedRequest& p) { EXPECT_EQ(p.request.stop, std::vector<std::string>{"x"}); }},
      {"stream", true, [](const ParsedRequest& p) { EXPECT_TRUE(p.request.stream); }},
      {"temperature", 0.5, [](const ParsedRequest& p) { EXPECT_EQ(p.request.sampling.temperature, 0.5f); }},
      {"top_p", 0.5, [](const ParsedRequest& p) { EXPECT_EQ(p.request.sampling.top_p, 0.5f); }},
      {"user", "u", [](const ParsedRequest& p) { EXPECT_EQ(p.request.user, "u"); }},
  };
}

TEST(OpenAIFields, EveryCompletionsFieldIsHonouredOrRefused) {
  const json base = {{"model", "m"}, {"prompt", "Once"}};
  std::vector<Field> fields = common_fields();
  fields.push_back({"best_of", 3, [](const ParsedRequest& p) { EXPECT_EQ(p.best_of, 3); EXPECT_EQ(p.n, 1); }});
  fields.push_back({"echo", true, [](const ParsedRequest& p) { EXPECT_TRUE(p.echo); }});
  fields.push_back({"logprobs", 2, [](const ParsedRequest& p) {
                      EXPECT_TRUE(p.logprobs);
                      EXPECT_EQ(p.request.sampling.top_logprobs, 2);
                    }});
  fields.push_back({"suffix", "end", nullptr});
  fields.push_back({"logprobs", -2, nullptr});  // a negative count is refused, not read as "off" (issue 18)
  fields.push_back({"stream_options", json{{"include_usage", true}}, nullptr});  // without stream: true, refused
  check(RequestKind::kCompletion, base, fields);
  // With stream: true, stream_options.include_usage is honoured.
  check(RequestKind::kCompletion, json{{"prompt", "Once"}, {"stream", true}},
        {{"stream_options", json{{"include_usage", true}}, [](const ParsedRequest& p) { EXPECT_TRUE(p.include_usage); }}});
  // model and prompt are the base: honoured (model checked by the request preparer).
}

// Refusals of n, best_of, echo and prompt lists name the field and say why.
TEST(OpenAIFields, SeveralChoicesAreCheckedByName) {
  struct Case {
    const char* body;
    const char* param;
    const char* says;
  };
  const Case cases[] = {
      {R"({"prompt":"a","n":0})", "n", "n must be in [1, 16] (got 0)"},
      {R"({"prompt":"a","n":17})", "n", "n must be in [1, 16] (got 17)"},
      {R"({"messages":[{"role":"user","content":"a"}],"n":17})", "n", "n must be in [1, 16]"},
      {R"({"prompt":"a","n":3,"best_of":2})", "best_of", "best_of must be in [n, 16] (got 2 with n = 3)"},
      {R"({"prompt":"a","best_of":17})", "best_of", "best_of must be in [n, 16]"},
      {R"({"prompt":"a","best_of":2,"stream":true})", "best_of", "best_of > 1 cannot be streamed"},
      {R"({"prompt":"a","suffix":"b"})", "suffix", "suffix"},
      {R"({"prompt":["a",[1,2]]})", "prompt", "prompt[0] is string but prompt[1] is array"},
      {R"({"prompt":[1,"a"]})", "prompt", "prompt[0] is integer but prompt[1] is string"},
      {R"({"prompt":[[1,2],[]]})", "prompt", "'prompt[1]' must not be an empty array"},
      {R"({"prompt":[[1,"x"]]})", "prompt", "'prompt[0]' must be an array of token ids (element 1 is string)"},
      {R"({"prompt":[]})", "prompt", "'prompt' must not be an empty array"},
      {R"({"prompt":[{"a":1}]})", "prompt", "prompt[0] is object"},
      {R"({"prompt":["a","b","c","d","e"],"n":4,"best_of":16})", "best_of", "5 prompts x 16 candidates = 80 sequences; at most 64"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    std::string param;
    const RequestKind kind = std::string(c.body).find("messages") != std::string::npos ? RequestKind::kChat : RequestKind::kCompletion;
    auto r = parse_request(c.body, kind, {}, &param);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(http_status(r.error().code), 400);
    EXPECT_EQ(param, c.param);
    EXPECT_NE(r.error().message.find(c.says), std::string::npos) << r.error().message;
  }
  // Lists: strings, token-id lists; one prompt of ids stays one prompt.
  std::string param;
  auto strings = parse_request(R"({"prompt":["a","b"],"n":2})", RequestKind::kCompletion, {}, &param);
  ASSERT_TRUE(strings.ok()) << strings.error().to_string();
  ASSERT_EQ(strings->prompts.size(), 2u);
  EXPECT_EQ(strings->prompts[1].text, "b");
  EXPECT_EQ(strings->request.prompt, "a");
  auto lists = parse_request(R"({"prompt":[[1,2],[3]]})", RequestKind::kCompletion, {}, &param);
  ASSERT_TRUE(lists.ok()) << lists.error().to_string();
  ASSERT_EQ(lists->prompts.size(), 2u);
  EXPECT_EQ(lists->prompts[1].tokens, std::vector<int32_t>{3});
  EXPECT_EQ(lists->request.prompt_tokens, (std::vector<int32_t>{1, 2}));
  auto ids = parse_request(R"({"prompt":[1,2,3]})", RequestKind::kCompletion, {}, &param);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->prompts.size(), 1u);
  // Seeds: candidate 0 keeps the request's seed; the others differ from it and from each other.
  EXPECT_EQ(candidate_seed(42, 0), 42u);
  EXPECT_NE(candidate_seed(42, 1), 42u);
  EXPECT_NE(candidate_seed(42, 1), candidate_seed(42, 2));
  EXPECT_EQ(candidate_seed(42, 3), candidate_seed(42, 3));
}

TEST(OpenAIFields, EveryChatCompletionsFieldIsHonouredOrRefused) {
  const json base = {{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  std::vector<Field> fields = common_fields();
  const std::vector<std::pair<std::string, json>> refused = {
      {"audio", json{{"voice", "alloy"}, {"format", "mp3"}}},
      {"function_call", "auto"},
      {"functions", json::array({{{"name", "f"}}})},
      {"metadata", json{{"k", "v"}}},
      {"modalities", json::array({"text", "audio"})},
      {"prediction", json{{"type", "content"}, {"content", "x"}}},
      {"reasoning_effort", "low"},
      {"service_tier", "auto"},
      {"store", true},
      {"web_search_options", json::object()},
      {"prompt_cache_key", "k"},
      {"safety_identifier", "s"},
      {"verbosity", "low"},
      {"top_logprobs", 2},  // without logprobs: true (OpenAI and vLLM answer 400)
  };
  for (const auto& [name, value] : refused) fields.push_back({name, value, nullptr});
  fields.push_back({"logprobs", true, [](const ParsedRequest& p) { EXPECT_TRUE(p.logprobs); }});
  fields.push_back({"response_format", json{{"type", "json_object"}},
                    [](const ParsedRequest& p) { EXPECT_EQ(p.request.sampling.grammar, R"({"type":"object"})"); }});
  // Tools (docs/api.md "Tool calls"): honoured; tool_choice without tools asks for nothing.
  fields.push_back({"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}}),
                    [](const ParsedRequest& p) { EXPECT_TRUE(p.tools.active()); }});
  fields.push_back({"tool_choice", "auto", [](const ParsedRequest& p) { EXPECT_FALSE(p.tools.active()); }});
  fields.push_back({"parallel_tool_calls", false, [](const ParsedRequest& p) { EXPECT_FALSE(p.tools.parallel); }});
  fields.push_back({"max_completion_tokens", 9, [](const ParsedRequest& p) { EXPECT_EQ(p.request.max_tokens, 9); }});
  check(RequestKind::kChat, base, fields);
  json with_lp = base;
  with_lp["logprobs"] = true;
  check(RequestKind::kChat, with_lp,
        {{"top_logprobs", 3, [](const ParsedRequest& p) { EXPECT_EQ(p.request.sampling.top_logprobs, 3); }},
         {"top_logprobs", -2, nullptr}});
  // The plain-text values of refused features ask for nothing and are accepted.
  check(RequestKind::kChat, base,
        {{"response_format", json{{"type", "text"}}, [](const ParsedRequest&) {}},
         {"tool_choice", "none", [](const ParsedRequest&) {}},
         {"store", false, [](const ParsedRequest&) {}}});
}

// response_format json_schema: the schema text keeps the client's property order (generation
// follows it); schemas outside the supported subset are refused naming the keyword.
TEST(OpenAIFields, ResponseFormatJsonSchema) {
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema",
      "json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"zeta":{"type":"integer"},
      "alpha":{"type":"string"}},"required":["zeta","alpha"]}}}})";
  std::string param;
  auto r = parse_request(body, RequestKind::kChat, {}, &param);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_LT(r->request.sampling.grammar.find("zeta"), r->request.sampling.grammar.find("alpha"));
  const std::string bad = R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"p",
      "schema":{"type":"object","properties":{"a":{"type":"string","format":"email"}}}}}})";
  r = parse_request(bad, RequestKind::kCompletion, {}, &param);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(param, "response_format");
  EXPECT_EQ(http_status(r.error().code), 400);
  EXPECT_NE(r.error().message.find("/properties/a: keyword 'format'"), std::string::npos) << r.error().message;
}

TEST(OpenAIFields, ResponseShapes) {
  ResponseMeta meta{.kind = RequestKind::kChat, .id = "chatcmpl-x", .model = "m", .created = 1, .stream_usage = StreamUsage::kNone};
  protocol::FinalEvent f;
  f.usage.prompt_tokens = 3;
  json last = json::parse(stream_chunk(meta, "", {}, false, "stop", &f).substr(6));
  EXPECT_FALSE(last.contains("usage")) << "usage only when stream_options.include_usage";
  json u = json::parse(usage_chunk(meta, f).substr(6));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(json::parse(model_json("m", 1, 512))["max_model_len"], 512);
  EXPECT_NE(random_hex_id(), random_hex_id());
  EXPECT_EQ(random_hex_id().size(), 24u);
}

}  // namespace
}  // namespace tessera::frontend
