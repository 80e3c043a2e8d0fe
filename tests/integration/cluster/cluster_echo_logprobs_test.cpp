// echo + logprobs on /v1/completions (prompt log-probabilities) against a real cluster
// (stories260K): OpenAI's shape (first token null, text_offset), agreement with the
// log-probabilities of the same tokens when they were generated (a greedy non-echo request
// continued by its own output; 1e-4), the prefix cache (skipped for the scored prompt, still
// filled for others), streaming and n.
#include <cmath>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/openai_client.h"

namespace tessera::testing::cluster_echo_logprobs_test {
namespace {

using nlohmann::json;

class ClusterEchoLogprobsTest : public ApiClusterTest {
 protected:
  std::vector<int> tokenize(const std::string& text) { return post("/tokenize", {{"prompt", text}})["tokens"].get<std::vector<int>>(); }

  // The streamed choices' logprobs, concatenated per choice index, and their text.
  std::map<int, json> stream_logprobs(const json& body, std::map<int, std::string>* text) {
    std::map<int, json> out;
    auto on_data = [&](const std::string& data) {
      if (data == "[DONE]") return;
      json j = json::parse(data, nullptr, false);
      ASSERT_FALSE(j.is_discarded() || j.contains("error")) << data;
      for (const json& c : j.at("choices")) {
        const int index = c.at("index").get<int>();
        (*text)[index] += c.value("text", "");
        if (c["logprobs"].is_null()) continue;
        json& acc = out[index];
        for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
          for (const json& v : c["logprobs"][key]) acc[key].push_back(v);
      }
    };
    auto r = post_sse(cluster_->http_port(), "/v1/completions", body.dump(), on_data);
    EXPECT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.error().to_string());
    return out;
  }
};

void expect_same_logprob(const json& a, const json& b, const std::string& where) {
  ASSERT_TRUE(a.is_number() && b.is_number()) << where << ": " << a << " vs " << b;
  EXPECT_NEAR(a.get<double>(), b.get<double>(), 1e-4) << where;
}

TEST_F(ClusterEchoLogprobsTest, PromptLogprobsAgreeWithTheGeneratedOnes) {
  // B: a greedy completion with its log-probabilities.
  const std::string prompt = "Once upon a time";
  const std::vector<int> p0 = tokenize(prompt);
  const json b = post("/v1/completions", {{"prompt", p0}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 2}});
  const json& blp = b["choices"][0]["logprobs"];
  ASSERT_EQ(blp["tokens"].size(), 8u) << b.dump();
  // A: the prompt followed by B's text, echoed with log-probabilities. Where its tokens are B's
  // tokens, their log-probabilities are those B got when it generated them.
  const std::vector<int> t = tokenize(prompt + b["choices"][0]["text"].get<std::string>());
  ASSERT_GE(t.size(), p0.size() + 3);
  ASSERT_TRUE(std::equal(p0.begin(), p0.end(), t.begin())) << "the prompt's tokens must start the longer text's";
  const json a = post("/v1/completions", {{"prompt", t}, {"max_tokens", 1}, {"temperature", 0}, {"echo", true}, {"logprobs", 2}});
  const json& alp = a["choices"][0]["logprobs"];
  ASSERT_EQ(alp["tokens"].size(), t.size() + 1) << a.dump();  // the prompt's tokens, then the generated one
  ASSERT_EQ(alp["token_logprobs"].size(), t.size() + 1);
  ASSERT_EQ(alp["top_logprobs"].size(), t.size() + 1);
  ASSERT_EQ(alp["text_offset"].size(), t.size() + 1);
  EXPECT_TRUE(alp["token_logprobs"][0].is_null()) << "the first prompt token has no log-probability (OpenAI: null)";
  EXPECT_TRUE(alp["top_logprobs"][0].is_null());
  EXPECT_EQ(alp["text_offset"][0], 0);
  for (size_t i = 1; i < alp["text_offset"].size(); ++i) EXPECT_GE(alp["text_offset"][i], alp["text_offset"][i - 1]) << i;
  for (size_t i = 1; i < t.size(); ++i) {
    EXPECT_LE(alp["token_logprobs"][i].get<double>(), 0.0) << i;
    EXPECT_EQ(alp["top_logprobs"][i].size(), 2u) << i;
  }
  size_t compared = 0;
  for (size_t i = 0; p0.size() + i < t.size() && i < blp["tokens"].size(); ++i) {
    if (alp["tokens"][p0.size() + i] != blp["tokens"][i]) break;  // retokenized differently from here on
    const std::string where = "generated token " + std::to_string(i);
    expect_same_logprob(alp["token_logprobs"][p0.size() + i], blp["token_logprobs"][i], where);
    ASSERT_EQ(alp["top_logprobs"][p0.size() + i].size(), blp["top_logprobs"][i].size()) << where;
    for (const auto& [tok, lp] : blp["top_logprobs"][i].items()) {
      ASSERT_TRUE(alp["top_logprobs"][p0.size() + i].contains(tok)) << where << " alternative " << tok;
      expect_same_logprob(alp["top_logprobs"][p0.size() + i][tok], lp, where + " alternative " + tok);
    }
    ++compared;
  }
  EXPECT_GE(compared, 3u) << "too few tokens to compare";
  EXPECT_EQ(a["choices"][0]["text"].get<std::string>().rfind(prompt, 0), 0u) << a.dump();
}

TEST_F(ClusterEchoLogprobsTest, TheCachedPrefixIsNotUsedForScoringButStaysShared) {
  const std::vector<int> t = tokenize("Zorb the purple dragon lived on a hill above the village. Every morning Zorb flew over the river");
  ASSERT_GT(t.size(), 17u) << "more than one page of 16 tokens";
  const json plain = {{"prompt", t}, {"max_tokens", 2}, {"temperature", 0}};
  post("/v1/completions", plain);  // caches the prompt's full pages
  json echo = plain;
  echo["echo"] = true;
  echo["logprobs"] = 1;
  const json first = post("/v1/completions", echo);
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << "scoring computes the whole prompt";
  const json second = post("/v1/completions", echo);
  EXPECT_EQ(second["choices"][0]["logprobs"], first["choices"][0]["logprobs"]) << "the same answer, cached pages or not";
  EXPECT_GT(post("/v1/completions", plain)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0)
      << "requests without prompt logprobs still share the prompt's pages";
}

TEST_F(ClusterEchoLogprobsTest, StreamedAndSeveralChoicesCarryThePromptPart) {
  const std::string prompt = "The little dog ran to the park";
  const json body = {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}, {"echo", true}, {"logprobs", 1}};
  const json whole = post("/v1/completions", body);
  const json& want = whole["choices"][0]["logprobs"];
  json streamed = body;
  streamed["stream"] = true;
  std::map<int, std::string> text;
  std::map<int, json> got = stream_logprobs(streamed, &text);
  EXPECT_EQ(text[0], whole["choices"][0]["text"]);
  ASSERT_EQ(got[0]["tokens"], want["tokens"]);
  EXPECT_EQ(got[0]["text_offset"], want["text_offset"]);
  EXPECT_TRUE(got[0]["token_logprobs"][0].is_null());
  for (size_t i = 1; i < want["token_logprobs"].size(); ++i)
    expect_same_logprob(got[0]["token_logprobs"][i], want["token_logprobs"][i], "streamed token " + std::to_string(i));
  // n = 2: one scoring, both choices start with it.
  json two = body;
  two["n"] = 2;
  const json n2 = post("/v1/completions", two);
  ASSERT_EQ(n2["choices"].size(), 2u);
  const size_t prompt_len = want["tokens"].size() - 4;
  for (int c = 0; c < 2; ++c) {
    const json& lp = n2["choices"][c]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), want["tokens"].size()) << c;
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    for (size_t i = 1; i < prompt_len; ++i)
      expect_same_logprob(lp["token_logprobs"][i], want["token_logprobs"][i], "choice " + std::to_string(c) + " token " + std::to_string(i));
  }
}

// The ZeroMQ form: prompt_logprobs on a completion gives the same figures as HTTP's echo +
// logprobs (element i = prompt token i + 1), in the final when not streamed, in one event with
// no tokens before the first token when streamed.
TEST_F(ClusterEchoLogprobsTest, ZeroMqPromptLogprobsMatchHttp) {
  const std::vector<int> t = tokenize("The cat sat on the mat");
  const json http = post("/v1/completions", {{"prompt", t}, {"max_tokens", 2}, {"temperature", 0}, {"echo", true}, {"logprobs", 1}});
  const json& want = http["choices"][0]["logprobs"]["token_logprobs"];
  zmq::context_t ctx{1};
  zmq::socket_t sock(ctx, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::linger, 0);
  sock.set(zmq::sockopt::rcvtimeo, 20000);
  sock.connect(cluster_->zmq_endpoint());
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    protocol::GenerateRequest r{.id = stream ? 2u : 1u, .max_tokens = 2, .stream = stream};
    r.prompt_tokens.assign(t.begin(), t.end());
    r.sampling.temperature = 0.0f;
    r.sampling.prompt_logprobs = 1;
    ASSERT_TRUE(zmqu::send(sock, {protocol::encode(r)}).ok());
    std::vector<float> got;
    std::vector<std::vector<TokenLogprob>> top;
    bool token_seen = false, ended = false;
    while (!ended) {
      auto frames = zmqu::recv(sock);
      ASSERT_TRUE(frames.ok() && !frames->empty()) << "no reply";
      auto m = protocol::decode(frames->back());
      ASSERT_TRUE(m.ok()) << m.error().to_string();
      if (const auto* tok = std::get_if<protocol::TokenEvent>(&*m)) {
        if (!tok->prompt_logprobs.empty()) {
          EXPECT_FALSE(token_seen) << "prompt log-probabilities come before the first token";
          EXPECT_TRUE(tok->tokens.empty());
          got = tok->prompt_logprobs;
          top = tok->prompt_top_logprobs;
        }
        token_seen = token_seen || !tok->tokens.empty();
      } else if (const auto* fin = std::get_if<protocol::FinalEvent>(&*m)) {
        if (!stream) {
          got = fin->prompt_logprobs;
          top = fin->prompt_top_logprobs;
        } else {
          EXPECT_TRUE(fin->prompt_logprobs.empty());
        }
        ended = true;
      } else {
        FAIL() << "unexpected " << protocol::message_type(*m);
      }
    }
    ASSERT_EQ(got.size(), t.size() - 1);
    ASSERT_EQ(top.size(), t.size() - 1);
    for (size_t i = 0; i < got.size(); ++i) expect_same_logprob(json(got[i]), want[i + 1], "prompt token " + std::to_string(i + 1));
  }
}

}  // namespace
}  // namespace tessera::testing::cluster_echo_logprobs_test
