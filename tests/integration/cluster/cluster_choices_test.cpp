// Several choices per request over the OpenAI API against a real cluster (stories260K):
// n (completions and chat, plain and streamed), best_of, echo, prompt lists, their seeds,
// usage, the sharing of the prompt's pages through the prefix cache, and the refusals.
#include <cmath>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/openai_client.h"

namespace tessera::testing::cluster_choices_test {
namespace {

using nlohmann::json;

class ClusterChoicesTest : public ApiClusterTest {
 protected:
  json completion(json body) { return post("/v1/completions", body); }

  struct Streamed {
    std::map<int, std::string> text;           // by choice index
    std::map<int, std::string> finish_reason;  // by choice index
    std::map<int, int> role_chunks;            // chat: chunks announcing the role, by index
    json usage;
    int usage_chunks = 0;
    bool done = false;
    std::string error;
  };
  Streamed stream(const std::string& path, const json& body) {
    Streamed s;
    auto on_data = [&](const std::string& data) {
      if (data == "[DONE]") {
        s.done = true;
        return;
      }
      json j = json::parse(data, nullptr, false);
      if (j.is_discarded() || j.contains("error")) {
        s.error = data;
        return;
      }
      if (j.contains("usage")) {
        s.usage = j["usage"];
        ++s.usage_chunks;
        EXPECT_TRUE(j["choices"].empty()) << data;
      }
      for (const json& c : j.at("choices")) {
        const int index = c.at("index").get<int>();
        if (c.contains("text")) s.text[index] += c["text"].get<std::string>();
        if (c.contains("delta")) {
          if (c["delta"].contains("content")) s.text[index] += c["delta"]["content"].get<std::string>();
          if (c["delta"].contains("role")) ++s.role_chunks[index];
        }
        if (!c["finish_reason"].is_null()) {
          EXPECT_EQ(s.finish_reason.count(index), 0u) << "two finish chunks for choice " << index;
          s.finish_reason[index] = c["finish_reason"].get<std::string>();
        }
      }
    };
    auto r = post_sse(cluster_->http_port(), path, body.dump(), on_data);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
    if (r.ok()) {
      EXPECT_EQ(r->status, 200) << r->body;
    }
    return s;
  }
  double frontend_metric(const std::string& name) { return cluster_->metric(cluster_->http_port(), name); }
};

std::vector<std::string> texts(const json& response) {
  std::vector<std::string> out;
  for (const json& c : response.at("choices"))
    out.push_back(c.contains("text") ? c["text"].get<std::string>() : c["message"]["content"].get<std::string>());
  return out;
}

// n = 3: three choices indexed 0..2, different (sampled with derived seeds), each with its own
// finish_reason; choice 0 is what n = 1 gives with the same seed; the whole response is
// reproducible; usage counts the prompt once and every choice's tokens; and the later choices
// reuse the prompt's pages from the prefix cache (exact count).
TEST_F(ClusterChoicesTest, NChoicesShareThePromptAndAreReproducible) {
  const std::string prompt =
      "Zorb the purple dragon lived on a hill above the village. Every morning Zorb flew over the river and the";
  const json body = {{"prompt", prompt}, {"n", 3}, {"max_tokens", 12}, {"temperature", 1.0}, {"seed", 1234}, {"ignore_eos", true}};
  const double cached_before = frontend_metric("tessera_frontend_cached_prompt_tokens_total");
  const json a = completion(body);
  ASSERT_EQ(a.at("choices").size(), 3u) << a.dump();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a["choices"][i]["index"], i);
    EXPECT_EQ(a["choices"][i]["finish_reason"], "length");
    EXPECT_TRUE(a["choices"][i]["logprobs"].is_null());
  }
  const std::vector<std::string> t = texts(a);
  EXPECT_NE(t[0], t[1]);
  EXPECT_NE(t[1], t[2]);
  const int prompt_tokens = a["usage"]["prompt_tokens"].get<int>();
  ASSERT_GT(prompt_tokens, 32) << "the prompt must span more than two pages of 16 tokens";
  EXPECT_EQ(a["usage"]["completion_tokens"], 36);
  EXPECT_EQ(a["usage"]["total_tokens"], prompt_tokens + 36);
  EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << "the first sequence of a fresh prompt hits nothing";
  // Candidates 1 and 2 were submitted after candidate 0's prefill: each reused its full pages.
  const int shared = std::min(prompt_tokens / 16 * 16, prompt_tokens - 1);
  EXPECT_EQ(frontend_metric("tessera_frontend_cached_prompt_tokens_total") - cached_before, 2.0 * shared);
  // Reproducible with the seed; choice 0 is the n = 1 answer for that seed.
  EXPECT_EQ(texts(completion(body)), t);
  json one = body;
  one["n"] = 1;
  EXPECT_EQ(texts(completion(one)), std::vector<std::string>{t[0]});
  // Without a seed: random, but still three choices.
  json unseeded = body;
  unseeded.erase("seed");
  EXPECT_EQ(completion(unseeded).at("choices").size(), 3u);
}

// Streaming interleaves chunks of every choice, each carrying its index; every choice ends with
// its own finish chunk; the usage chunk (include_usage) sums them; the texts equal the
// non-streamed response's.
TEST_F(ClusterChoicesTest, NChoicesStreamWithTheirIndex) {
  json body = {{"prompt", "Once upon a time"}, {"n", 2}, {"max_tokens", 10}, {"temperature", 0.8}, {"seed", 77}, {"ignore_eos", true}};
  const std::vector<std::string> whole = texts(completion(body));
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  Streamed s = stream("/v1/completions", body);
  EXPECT_TRUE(s.done);
  EXPECT_TRUE(s.error.empty()) << s.error;
  ASSERT_EQ(s.text.size(), 2u);
  EXPECT_EQ(s.text[0], whole.at(0));
  EXPECT_EQ(s.text[1], whole.at(1));
  EXPECT_EQ(s.finish_reason[0], "length");
  EXPECT_EQ(s.finish_reason[1], "length");
  EXPECT_EQ(s.usage_chunks, 1);
  EXPECT_EQ(s.usage["completion_tokens"], 20);
}

TEST_F(ClusterChoicesTest, ChatNChoices) {
  json body = {{"messages", json::array({{{"role", "user"}, {"content", "Tell me about a cat."}}})},
               {"n", 2}, {"max_tokens", 8}, {"temperature", 1.0}, {"seed", 5}, {"ignore_eos", true}, {"logprobs", true}};
  const json a = post("/v1/chat/completions", body);
  ASSERT_EQ(a.at("choices").size(), 2u) << a.dump();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(a["choices"][i]["index"], i);
    EXPECT_EQ(a["choices"][i]["message"]["role"], "assistant");
    EXPECT_EQ(a["choices"][i]["logprobs"]["content"].size(), 8u);
  }
  EXPECT_EQ(a["usage"]["completion_tokens"], 16);
  body["stream"] = true;
  Streamed s = stream("/v1/chat/completions", body);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.role_chunks[0], 1);
  EXPECT_EQ(s.role_chunks[1], 1);
  EXPECT_EQ(s.text[0], texts(a)[0]);
  EXPECT_EQ(s.text[1], texts(a)[1]);
}

// best_of = 4, n = 2: the two candidates (of the four that n = 4 shows with the same seed) with
// the highest cumulative log-probability, best first.
TEST_F(ClusterChoicesTest, BestOfReturnsTheMostLikelyCandidates) {
  json all = {{"prompt", "The dog ran"}, {"n", 4}, {"max_tokens", 6}, {"temperature", 1.0}, {"seed", 99},
              {"ignore_eos", true}, {"logprobs", 0}};
  const json a = completion(all);
  ASSERT_EQ(a.at("choices").size(), 4u) << a.dump();
  std::vector<std::pair<double, std::string>> ranked;
  for (const json& c : a["choices"]) {
    double sum = 0;
    for (const json& lp : c["logprobs"]["token_logprobs"]) sum += lp.get<double>();
    ranked.emplace_back(sum, c["text"].get<std::string>());
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  json best = all;
  best["n"] = 2;
  best["best_of"] = 4;
  best.erase("logprobs");
  const json b = completion(best);
  ASSERT_EQ(b.at("choices").size(), 2u) << b.dump();
  EXPECT_EQ(b["choices"][0]["index"], 0);
  EXPECT_EQ(b["choices"][1]["index"], 1);
  EXPECT_EQ(b["choices"][0]["text"], ranked[0].second);
  EXPECT_EQ(b["choices"][1]["text"], ranked[1].second);
  EXPECT_TRUE(b["choices"][0]["logprobs"].is_null()) << "logprobs were not asked";
  EXPECT_EQ(b["usage"]["completion_tokens"], 24) << "every candidate's tokens count";
  // Refused with stream (as OpenAI), naming best_of.
  best["stream"] = true;
  const json e = post("/v1/completions", best, 400);
  EXPECT_EQ(e["error"]["param"], "best_of");
}

TEST_F(ClusterChoicesTest, EchoPutsThePromptInFrontOfEachChoice) {
  const std::string prompt = "Once upon a time";
  json body = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string plain = texts(completion(body)).at(0);
  body["echo"] = true;
  body["n"] = 2;
  const json a = completion(body);
  EXPECT_EQ(texts(a), (std::vector<std::string>{prompt + plain, prompt + plain}));
  body["stream"] = true;
  Streamed s = stream("/v1/completions", body);
  EXPECT_EQ(s.text[0], prompt + plain);
  EXPECT_EQ(s.text[1], prompt + plain);
  // Token ids are echoed as their text.
  json ids = {{"prompt", json::array({1, 403, 407})}, {"max_tokens", 2}, {"temperature", 0}, {"echo", true}};
  const json d = post("/detokenize", {{"tokens", json::array({1, 403, 407})}});
  const std::string echoed = texts(completion(ids)).at(0);
  EXPECT_EQ(echoed.rfind(d.value("prompt", std::string("?")), 0), 0u) << echoed << " vs " << d.dump();
  // echo + logprobs (prompt log-probabilities): cluster_echo_logprobs_test.cpp.
}

// A prompt list runs one request per prompt; choices are prompt-major (index = prompt * n + i);
// each prompt's choices are what the prompt alone gives; usage sums the prompts.
TEST_F(ClusterChoicesTest, PromptListsAreBatchedPromptMajor) {
  const std::vector<std::string> prompts = {"Once upon a time", "The cat sat"};
  json body = {{"prompt", prompts}, {"n", 2}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
  const json a = completion(body);
  ASSERT_EQ(a.at("choices").size(), 4u) << a.dump();
  int prompt_tokens = 0;
  for (size_t k = 0; k < prompts.size(); ++k) {
    const json alone = completion({{"prompt", prompts[k]}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
    prompt_tokens += alone["usage"]["prompt_tokens"].get<int>();
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(a["choices"][k * 2 + i]["index"], k * 2 + i);
      EXPECT_EQ(a["choices"][k * 2 + i]["text"], alone["choices"][0]["text"]) << "prompt " << k << " choice " << i;
    }
  }
  EXPECT_EQ(a["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(a["usage"]["completion_tokens"], 24);
  // Token-id lists too.
  const json lists = completion({{"prompt", json::array({json::array({1, 403}), json::array({1, 407, 408})})}, {"max_tokens", 3},
                                 {"temperature", 0}});
  ASSERT_EQ(lists.at("choices").size(), 2u);
  EXPECT_EQ(lists["usage"]["prompt_tokens"], 5);
  // Mixed element types: 400 naming prompt and the elements.
  const json e = post("/v1/completions", {{"prompt", json::array({"a", json::array({1})})}}, 400);
  EXPECT_EQ(e["error"]["param"], "prompt");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("prompt[1] is array"), std::string::npos) << e.dump();
  // A bad prompt anywhere in the list refuses the request, naming prompt.
  const json bad = post("/v1/completions", {{"prompt", json::array({json::array({1}), json::array({999999})})}}, 400);
  EXPECT_EQ(bad["error"]["param"], "prompt");
}

// A stop string ends each choice on its own (the frontend cancels that sequence only): greedy
// choices stop at the same place, sampled ones where each meets it, or run to max_tokens.
TEST_F(ClusterChoicesTest, StopStringsEndEachChoice) {
  const json greedy = completion({{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}});
  const std::string full = greedy["choices"][0]["text"].get<std::string>();
  const std::string stop = "Lily";
  const size_t at = full.find(stop);
  ASSERT_NE(at, std::string::npos) << full;
  json body = {{"prompt", "Once upon a time"}, {"n", 2}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}, {"stop", stop}};
  const json a = completion(body);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(a["choices"][i]["text"], full.substr(0, at));
    EXPECT_EQ(a["choices"][i]["finish_reason"], "stop");
  }
  EXPECT_LT(a["usage"]["completion_tokens"].get<int>(), 80);
  body["stream"] = true;
  Streamed s = stream("/v1/completions", body);
  EXPECT_EQ(s.text[0], full.substr(0, at));
  EXPECT_EQ(s.text[1], full.substr(0, at));
  EXPECT_EQ(s.finish_reason[0], "stop");
  EXPECT_EQ(s.finish_reason[1], "stop");
}

TEST_F(ClusterChoicesTest, LimitsAreNamed) {
  EXPECT_EQ(post("/v1/completions", {{"prompt", "a"}, {"n", 17}}, 400)["error"]["param"], "n");
  EXPECT_EQ(post("/v1/completions", {{"prompt", "a"}, {"n", 2}, {"best_of", 1}}, 400)["error"]["param"], "best_of");
  EXPECT_EQ(post("/v1/completions", {{"prompt", "a"}, {"suffix", "b"}}, 400)["error"]["param"], "suffix");
}

}  // namespace
}  // namespace tessera::testing::cluster_choices_test
