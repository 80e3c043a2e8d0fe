// End-to-end correctness of the cluster (scheduler + worker + frontend, stories260K):
// greedy.json over HTTP (plain and SSE) and over the frontend's ZeroMQ API, the Python client of
// docs/protocol.md, 32 concurrent streams against single-stream references, prefix caching.
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "tessera/common/child_process.h"
#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/paths.h"

namespace tessera::testing::cluster_test {
namespace {

using nlohmann::json;

std::string completion_body(const std::string& prompt, int max_tokens, bool stream, bool ignore_eos = true) {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", stream},
              {"ignore_eos", ignore_eos}}
      .dump();
}

// Text of a non-streamed completion response ("" + test failure when it is not a 200).
std::string completion_text(const Result<http::Response>& r) {
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
  if (!r.ok()) return "";
  EXPECT_EQ(r->status, 200) << r->body;
  if (r->status != 200) return "";
  return json::parse(r->body).at("choices").at(0).at("text").get<std::string>();
}

struct Streamed {
  std::string text;
  bool done = false;  // saw data: [DONE]
  std::string error;  // an error event's JSON
  std::string finish_reason;
  json usage;
};

Streamed stream_completion(int port, const std::string& body, const std::string& path = "/v1/completions") {
  Streamed s;
  http::SseParser sse;
  auto on_data = [&](const std::string& data) {
    if (data == "[DONE]") {
      s.done = true;
      return;
    }
    json j = json::parse(data, nullptr, false);
    if (j.is_discarded()) return;
    if (j.contains("error")) {
      s.error = data;
      return;
    }
    const json& c = j.at("choices").at(0);
    if (c.contains("text")) s.text += c["text"].get<std::string>();
    if (c.contains("delta") && c["delta"].contains("content")) s.text += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) s.finish_reason = c["finish_reason"].get<std::string>();
    if (j.contains("usage")) s.usage = j["usage"];
  };
  auto r = http::request({.port = port, .method = "POST", .path = path, .body = body, .timeout_ms = 60000,
                                .on_body = [&](std::string_view b) {
                                  sse.feed(b, on_data);
                                  return true;
                                }});
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
  if (r.ok()) {
    EXPECT_EQ(r->status, 200) << r->body;
  }
  return s;
}

class ClusterTest : public SharedClusterTest {};

TEST_F(ClusterTest, GreedyOverHttp) {
  for (const auto& c : greedy_cases()) {
    SCOPED_TRACE(c.prompt);
    std::string text = completion_text(cluster_->post("/v1/completions", completion_body(c.prompt, c.steps, false)));
    EXPECT_EQ(text.substr(0, c.completion.size()), c.completion);
  }
}

TEST_F(ClusterTest, GreedyOverHttpStreamed) {
  for (const auto& c : greedy_cases()) {
    SCOPED_TRACE(c.prompt);
    Streamed s = stream_completion(cluster_->http_port(), completion_body(c.prompt, c.steps, true));
    EXPECT_TRUE(s.done) << "no data: [DONE]";
    EXPECT_TRUE(s.error.empty()) << s.error;
    EXPECT_EQ(s.finish_reason, "length");
    EXPECT_EQ(s.text.substr(0, c.completion.size()), c.completion);
  }
}

// Receives messages for request `id` on a DEALER until its final/error (or the deadline).
std::vector<protocol::Message> zmq_exchange(zmq::socket_t& sock, const std::string& body, uint64_t id) {
  std::vector<protocol::Message> out;
  EXPECT_TRUE(zmqu::send(sock, {body}).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(200));
    if (!(item.revents & ZMQ_POLLIN)) continue;
    auto frames = zmqu::recv(sock);
    if (!frames.ok() || frames->empty()) continue;
    auto msg = protocol::decode(frames->back());
    EXPECT_TRUE(msg.ok()) << (msg.ok() ? "" : msg.error().to_string());
    if (!msg.ok()) continue;
    if (protocol::message_id(*msg) != id) continue;
    out.push_back(*msg);
    if (std::holds_alternative<protocol::FinalEvent>(*msg) || std::holds_alternative<protocol::ErrorEvent>(*msg)) return out;
  }
  ADD_FAILURE() << "no final/error event for id " << id << " within 20 s";
  return out;
}

TEST_F(ClusterTest, GreedyOverZmq) {
  zmq::context_t ctx(1);
  zmq::socket_t sock(ctx, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::linger, 0);
  sock.connect(cluster_->zmq_endpoint());
  uint64_t id = 100;
  for (const auto& c : greedy_cases()) {
    SCOPED_TRACE(c.prompt);
    for (bool stream : {false, true}) {
      protocol::GenerateRequest req;
      req.id = ++id;
      req.prompt = c.prompt;
      req.max_tokens = c.steps;
      req.sampling.temperature = 0.0f;
      req.ignore_eos = true;
      req.stream = stream;
      auto msgs = zmq_exchange(sock, protocol::encode(req), id);
      ASSERT_FALSE(msgs.empty());
      std::string streamed;
      for (const auto& m : msgs)
        if (auto* t = std::get_if<protocol::TokenEvent>(&m)) streamed += t->text;
      auto* fin = std::get_if<protocol::FinalEvent>(&msgs.back());
      ASSERT_NE(fin, nullptr) << "ended with '" << protocol::message_type(msgs.back()) << "'";
      const std::string text = stream ? streamed + fin->text : fin->text;
      EXPECT_EQ(text.substr(0, c.completion.size()), c.completion) << "stream=" << stream;
      EXPECT_EQ(fin->usage.completion_tokens, c.steps);
    }
  }
}

TEST_F(ClusterTest, PythonClientFromProtocolDoc) {
  const std::string script = testing::source_path("tests/integration/frontend/py_client.py");
  ASSERT_TRUE(std::ifstream(script).good()) << "missing " << script;
  const auto c = greedy_cases().at(0);
  auto run = run_to_exit({.binary = "/usr/bin/python3", .args = {script, cluster_->zmq_endpoint(), c.prompt, "40"},
                          .stdout_to = ChildOutput::pipe(), .stderr_to = ChildOutput::same_as_stdout()});
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  const std::string& out = run->second;
  EXPECT_EQ(run->first.raw(), 0) << out;
  // Without ignore_eos the text may end early at EOS; it must be a prefix of the reference.
  const std::string marker = "TEXT: ";
  ASSERT_NE(out.find(marker), std::string::npos) << out;
  std::string text = out.substr(out.find(marker) + marker.size());
  text = text.substr(0, text.find("\nFINISH:"));
  ASSERT_FALSE(text.empty()) << out;
  EXPECT_EQ(c.completion.substr(0, text.size()), text) << out;
}

TEST_F(ClusterTest, ThirtyTwoConcurrentStreamsMatchSingleStream) {
  const char* names[] = {"Lily", "Tom", "Ben", "Sue", "Max", "Anna", "Sam", "Mia"};
  const char* forms[] = {"Once upon a time, %s", "%s was a little", "One day, %s went to the", "%s liked to play with"};
  std::vector<std::string> prompts;
  for (const char* f : forms)
    for (const char* nm : names) {
      char buf[128];
      std::snprintf(buf, sizeof(buf), f, nm);
      prompts.emplace_back(buf);
    }
  ASSERT_EQ(prompts.size(), 32u);
  const int max_tokens = 48;
  std::vector<std::string> reference;
  for (const auto& p : prompts)
    reference.push_back(completion_text(cluster_->post("/v1/completions", completion_body(p, max_tokens, false))));

  std::vector<Streamed> got(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] { got[i] = stream_completion(cluster_->http_port(), completion_body(prompts[i], max_tokens, true)); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(prompts[i]);
    EXPECT_TRUE(got[i].done);
    EXPECT_TRUE(got[i].error.empty()) << got[i].error;
    EXPECT_FALSE(reference[i].empty());
    EXPECT_EQ(got[i].text, reference[i]);
  }
}

TEST_F(ClusterTest, SharedSystemPromptHitsThePrefixCache) {
  std::string system = "You are a kind storyteller for small children.";
  while (system.size() < 450) system += " Always tell short happy stories about animals, friends and the sun in the park.";
  auto chat = [&](const std::string& user) {
    return json{{"messages", json::array({json{{"role", "system"}, {"content", system}}, json{{"role", "user"}, {"content", user}}})},
                {"max_tokens", 8}, {"temperature", 0}}
        .dump();
  };
  auto first = cluster_->post("/v1/chat/completions", chat("Tell me about a cat."));
  ASSERT_TRUE(first.ok() && first->status == 200) << (first.ok() ? first->body : first.error().to_string());
  auto second = cluster_->post("/v1/chat/completions", chat("Tell me about a dog."));
  ASSERT_TRUE(second.ok() && second->status == 200) << (second.ok() ? second->body : second.error().to_string());
  const json u1 = json::parse(first->body).at("usage");
  const json u2 = json::parse(second->body).at("usage");
  ASSERT_GT(u2.at("prompt_tokens").get<int>(), 64) << u2.dump();
  const int cached = u2.at("prompt_tokens_details").at("cached_tokens").get<int>();
  EXPECT_GT(cached, 0) << u2.dump();
  // Every full page of the shared system prompt is reused (page size 16).
  EXPECT_GE(cached, u2.at("prompt_tokens").get<int>() - 64) << u1.dump() << " then " << u2.dump();
  const double fe_rate = cluster_->metric(cluster_->http_port(), "tessera_frontend_prefix_cache_hit_rate");
  const double sched_rate = cluster_->metric(cluster_->metrics_port(), "tessera_scheduler_prefix_cache_hit_rate");
  EXPECT_GT(fe_rate, 0.0);
  EXPECT_GT(sched_rate, 0.0);
  EXPECT_LE(sched_rate, 1.0);
}

}  // namespace
}  // namespace tessera::testing::cluster_test
