// The ZeroMQ client API's promises against a real cluster (docs/protocol.md "Client API"):
// messages of one connection are handled in arrival order (a cancel right behind its request
// cancels it; of two requests with one id the later is refused), log-probabilities only when
// asked, id 0 reserved, REQ sockets with stream false, limits in the heartbeat reply, and the
// same max_tokens default as HTTP. The races run TESSERA_RACE_TRIALS times (default 200).
#include <cstdlib>
#include <optional>
#include <string>

#include <gtest/gtest.h>
#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "tessera/testing/cluster.h"
#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"

namespace tessera::testing::cluster_test {
namespace {

int race_trials() {
  const char* v = std::getenv("TESSERA_RACE_TRIALS");
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 200;
}

// One msgpack map from (key, value) pairs of a few simple types.
class Map {
 public:
  Map& add(const std::string& k, int64_t v) { return put(k, [v](auto& p) { p.pack(v); }); }
  Map& add(const std::string& k, const std::string& v) { return put(k, [v](auto& p) { p.pack(v); }); }
  Map& add(const std::string& k, const char* v) { return add(k, std::string(v)); }
  Map& add(const std::string& k, bool v) { return put(k, [v](auto& p) { p.pack(v); }); }
  Map& add(const std::string& k, double v) { return put(k, [v](auto& p) { p.pack(v); }); }
  std::string bytes() const {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> p(buf);
    p.pack_map(static_cast<uint32_t>(items_.size()));
    for (const auto& [k, fn] : items_) {
      p.pack(k);
      fn(p);
    }
    return std::string(buf.data(), buf.size());
  }

 private:
  template <class Fn>
  Map& put(const std::string& k, Fn fn) {
    items_.emplace_back(k, std::function<void(msgpack::packer<msgpack::sbuffer>&)>(fn));
    return *this;
  }
  std::vector<std::pair<std::string, std::function<void(msgpack::packer<msgpack::sbuffer>&)>>> items_;
};

Map completion(uint64_t id, const std::string& prompt) {
  Map m;
  m.add("v", int64_t{1}).add("type", "completion").add("id", static_cast<int64_t>(id)).add("prompt", prompt);
  m.add("temperature", 0.0).add("ignore_eos", true);
  return m;
}

struct Reply {
  std::string body;
  protocol::Message msg;
};

class Client {
 public:
  explicit Client(const std::string& endpoint, zmq::socket_type type = zmq::socket_type::dealer) : sock_(ctx_, type) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.set(zmq::sockopt::rcvtimeo, 20000);
    sock_.connect(endpoint);
  }
  void send(const std::string& body) { ASSERT_TRUE(zmqu::send(sock_, {body}).ok()); }
  std::optional<Reply> recv() {
    auto frames = zmqu::recv(sock_);
    if (!frames.ok() || frames->empty()) return std::nullopt;
    auto m = protocol::decode(frames->back());
    if (!m.ok()) return std::nullopt;
    return Reply{frames->back(), std::move(*m)};
  }
  // Replies until the `final` or `error` of `id` (others are kept in `others`).
  std::vector<Reply> until_end(uint64_t id) {
    std::vector<Reply> out;
    while (auto r = recv()) {
      const bool mine = protocol::message_id(r->msg) == id;
      const bool end = std::holds_alternative<protocol::FinalEvent>(r->msg) || std::holds_alternative<protocol::ErrorEvent>(r->msg);
      out.push_back(std::move(*r));
      if (mine && end) return out;
    }
    ADD_FAILURE() << "no final/error for id " << id << " within 20 s";
    return out;
  }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t sock_;
};

class ClusterZmqApi : public SharedClusterTest {};

TEST_F(ClusterZmqApi, CancelRightBehindItsRequestAlwaysCancels) {
  Client c(cluster_->zmq_endpoint());
  const int trials = race_trials();
  int lost = 0;
  for (int i = 0; i < trials; ++i) {
    const uint64_t id = 1000 + static_cast<uint64_t>(i);
    c.send(completion(id, "Once upon a time").add("max_tokens", int64_t{400}).add("stream", true).bytes());
    c.send(Map().add("v", int64_t{1}).add("type", "cancel").add("id", static_cast<int64_t>(id)).bytes());
    auto replies = c.until_end(id);
    ASSERT_FALSE(replies.empty());
    auto* fin = std::get_if<protocol::FinalEvent>(&replies.back().msg);
    ASSERT_NE(fin, nullptr) << "trial " << i << ": " << replies.back().body.size();
    if (fin->finish_reason != "cancelled" || fin->usage.completion_tokens >= 400) ++lost;
  }
  EXPECT_EQ(lost, 0) << "cancels lost in " << trials << " trials";
}

// The same once the request runs at the scheduler: cancel after its first token. Paced workers
// (kPacedStepMs): the 400 tokens last >= 4 s, so the cancel always meets the request running
// (unpaced it is over in 60-300 ms, and a loaded machine can deliver the cancel after its end).
TEST(ClusterZmqApiPaced, CancelAfterTheFirstTokenAlwaysCancels) {
  Cluster cluster(ClusterOptions{.worker_min_step_ms = kPacedStepMs});
  ASSERT_TRUE(cluster.ok());
  Client c(cluster.zmq_endpoint());
  const int trials = race_trials();
  for (int i = 0; i < trials / 10; ++i) {
    const uint64_t id = 3000 + static_cast<uint64_t>(i);
    c.send(completion(id, "Once upon a time").add("max_tokens", int64_t{400}).add("stream", true).bytes());
    auto first = c.recv();
    ASSERT_TRUE(first.has_value());
    ASSERT_TRUE(std::holds_alternative<protocol::TokenEvent>(first->msg)) << "trial " << i;
    c.send(Map().add("v", int64_t{1}).add("type", "cancel").add("id", static_cast<int64_t>(id)).bytes());
    auto replies = c.until_end(id);
    auto* fin = std::get_if<protocol::FinalEvent>(&replies.back().msg);
    ASSERT_NE(fin, nullptr);
    EXPECT_EQ(fin->finish_reason, "cancelled");
    EXPECT_LT(fin->usage.completion_tokens, 400);
  }
}

TEST_F(ClusterZmqApi, DuplicateIdRefusesTheLaterRequest) {
  Client c(cluster_->zmq_endpoint());
  const int trials = race_trials();
  int wrong = 0;
  int earlier_done_first = 0;
  for (int i = 0; i < trials; ++i) {
    const uint64_t id = 5000 + static_cast<uint64_t>(i);
    c.send(completion(id, "Once upon a time").add("max_tokens", int64_t{24}).add("stream", false).bytes());
    c.send(completion(id, "Once upon a time").add("max_tokens", int64_t{1}).add("stream", false).bytes());
    // Ids are unique among requests in flight. Either the later one is refused while the
    // earlier runs (its final follows, 24 tokens), or — when the gateway's thread was
    // descheduled long enough for the earlier request to end before it read the later one —
    // the earlier's final comes first and the later runs as a request of its own (1 token).
    auto first = c.recv();
    ASSERT_TRUE(first.has_value());
    if (auto* done = std::get_if<protocol::FinalEvent>(&first->msg); done != nullptr && done->usage.completion_tokens == 24) {
      ++earlier_done_first;
      auto replies = c.until_end(id);
      ASSERT_FALSE(replies.empty());
      auto* later = std::get_if<protocol::FinalEvent>(&replies.back().msg);
      if (later == nullptr || later->usage.completion_tokens != 1) ++wrong;
      continue;
    }
    auto* err = std::get_if<protocol::ErrorEvent>(&first->msg);
    const bool refused_later = err != nullptr && err->message.find("duplicate id " + std::to_string(id)) != std::string::npos &&
                               err->message.find("later") != std::string::npos;
    auto replies = c.until_end(id);
    ASSERT_FALSE(replies.empty());
    auto* fin = std::get_if<protocol::FinalEvent>(&replies.back().msg);
    if (!refused_later || fin == nullptr || fin->usage.completion_tokens != 24) ++wrong;
  }
  EXPECT_EQ(wrong, 0) << "duplicate ids handled out of order in " << trials << " trials";
  EXPECT_LT(earlier_done_first, trials) << "no trial had both requests in flight at once";
}

TEST_F(ClusterZmqApi, LogprobsOnlyWhenAskedAndInTheNonStreamedFinal) {
  Client c(cluster_->zmq_endpoint());
  c.send(completion(1, "Once").add("max_tokens", int64_t{3}).add("stream", true).bytes());
  for (const auto& r : c.until_end(1)) {
    EXPECT_FALSE(protocol::peek_has_key(r.body, "logprobs"));
    EXPECT_FALSE(protocol::peek_has_key(r.body, "top_logprobs"));
    EXPECT_FALSE(protocol::peek_has_key(r.body, "preference_source")) << "usage keys of DKI only with a preference";
  }
  c.send(completion(2, "Once").add("max_tokens", int64_t{3}).add("stream", false).add("logprobs", true).add("top_logprobs", int64_t{2}).bytes());
  auto replies = c.until_end(2);
  ASSERT_EQ(replies.size(), 1u);
  auto* fin = std::get_if<protocol::FinalEvent>(&replies[0].msg);
  ASSERT_NE(fin, nullptr);
  ASSERT_EQ(fin->tokens.size(), 3u);
  EXPECT_EQ(fin->logprobs.size(), 3u);
  ASSERT_EQ(fin->top_logprobs.size(), 3u);
  EXPECT_EQ(fin->top_logprobs[0].size(), 2u);
  for (float lp : fin->logprobs) EXPECT_LE(lp, 0.0f);
}

TEST_F(ClusterZmqApi, IdZeroIsReservedAndErrorsNameTheClientId) {
  Client c(cluster_->zmq_endpoint());
  c.send(completion(0, "Once").add("max_tokens", int64_t{2}).bytes());
  auto r = c.recv();
  ASSERT_TRUE(r.has_value());
  auto* err = std::get_if<protocol::ErrorEvent>(&r->msg);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(err->message.find("id 0 is reserved"), std::string::npos) << err->message;
  // An error from preparation carries the client's id and no internal number.
  c.send(completion(77, "").add("max_tokens", int64_t{2}).bytes());
  r = c.recv();
  ASSERT_TRUE(r.has_value());
  err = std::get_if<protocol::ErrorEvent>(&r->msg);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err->id, 77u);
  EXPECT_EQ(err->message, "prompt must not be empty") << "the same check as HTTP";
}

TEST_F(ClusterZmqApi, ReqSocketWorksWithStreamFalse) {
  Client req(cluster_->zmq_endpoint(), zmq::socket_type::req);
  req.send(completion(3, "Once").add("max_tokens", int64_t{2}).add("stream", false).bytes());
  auto r = req.recv();
  ASSERT_TRUE(r.has_value());
  auto* fin = std::get_if<protocol::FinalEvent>(&r->msg);
  ASSERT_NE(fin, nullptr);
  EXPECT_EQ(fin->tokens.size(), 2u);
  req.send(completion(4, "Once").add("max_tokens", int64_t{2}).bytes());  // stream defaults to true
  r = req.recv();
  ASSERT_TRUE(r.has_value());
  auto* err = std::get_if<protocol::ErrorEvent>(&r->msg);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(err->message.find("stream must be false on a REQ socket"), std::string::npos) << err->message;
}

TEST_F(ClusterZmqApi, HeartbeatReplyGivesTheLimits) {
  Client c(cluster_->zmq_endpoint());
  c.send(Map().add("v", int64_t{1}).add("type", "heartbeat").add("id", int64_t{9}).bytes());
  auto r = c.recv();
  ASSERT_TRUE(r.has_value());
  auto* hb = std::get_if<protocol::Heartbeat>(&r->msg);
  ASSERT_NE(hb, nullptr);
  EXPECT_EQ(hb->model, "stories260K");
  EXPECT_EQ(hb->protocol_version, 1);
  EXPECT_EQ(hb->context_length, 512);
  EXPECT_GT(hb->page_size, 0);
  EXPECT_EQ(hb->max_prompt_tokens, 400);
  EXPECT_EQ(hb->vocab_size, 512);
  EXPECT_GT(hb->default_max_tokens, 0);
}

TEST_F(ClusterZmqApi, MaxTokensDefaultAndContextAreTheSameAsHttp) {
  Client c(cluster_->zmq_endpoint());
  c.send(completion(11, "Once upon a time").add("stream", false).bytes());
  auto replies = c.until_end(11);
  auto* fin = std::get_if<protocol::FinalEvent>(&replies.back().msg);
  ASSERT_NE(fin, nullptr);
  auto http = cluster_->post("/v1/completions", R"({"prompt":"Once upon a time","temperature":0,"ignore_eos":true})");
  ASSERT_TRUE(http.ok());
  ASSERT_EQ(http->status, 200) << http->body;
  EXPECT_EQ(fin->usage.completion_tokens, nlohmann::json::parse(http->body)["usage"]["completion_tokens"].get<int>());
  // max_tokens past the context: refused by both (ZeroMQ too_large, HTTP 400 context_length_exceeded).
  c.send(completion(12, "Once upon a time").add("max_tokens", int64_t{600}).add("stream", false).bytes());
  replies = c.until_end(12);
  auto* err = std::get_if<protocol::ErrorEvent>(&replies.back().msg);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err->code, ErrorCode::kTooLarge);
  http = cluster_->post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":600})");
  ASSERT_TRUE(http.ok());
  EXPECT_EQ(http->status, 400) << http->body;
  EXPECT_NE(http->body.find("context_length_exceeded"), std::string::npos) << http->body;
}

}  // namespace
}  // namespace tessera::testing::cluster_test

namespace tessera::testing::cluster_test {
namespace {

// OpenAI fields that need the model: logit_bias reaches the sampler; without `seed` sampling
// differs between requests, with one it repeats.
TEST_F(ClusterZmqApi, HttpLogitBiasAndSeed) {
  using nlohmann::json;
  auto complete = [&](const json& body) {
    auto r = cluster_->post("/v1/completions", body.dump());
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  };
  // Greedy, with token 300 pushed far above everything: every token is 300.
  json biased = complete({{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true},
                          {"logit_bias", {{"300", 100}}}});
  auto detok = cluster_->post("/detokenize", json{{"tokens", {300, 300, 300, 300}}}.dump());
  ASSERT_TRUE(detok.ok());
  // (detokenize drops a sequence's leading space; a continuation keeps it)
  const std::string text = biased["choices"][0]["text"], alone = json::parse(detok->body)["prompt"];
  EXPECT_EQ(text.substr(text.size() - alone.size()), alone) << biased.dump();
  EXPECT_LE(text.size(), alone.size() + 1);
  // Sampling at temperature 1: two unseeded requests differ (40 tokens), two seeded ones agree.
  const json sampled = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 1.0}, {"ignore_eos", true}};
  json s1 = sampled, s2 = sampled;
  s1["seed"] = 7;
  s2["seed"] = 7;
  EXPECT_EQ(complete(s1)["choices"][0]["text"], complete(s2)["choices"][0]["text"]);
  EXPECT_NE(complete(sampled)["choices"][0]["text"], complete(sampled)["choices"][0]["text"]);
}

// n, best_of, echo and suffix are OpenAI HTTP fields: the ZeroMQ API refuses them by name
// (docs/protocol.md), whatever the value, and goes on serving the connection.
TEST_F(ClusterZmqApi, OpenAiChoiceFieldsAreRefusedByName) {
  Client c(cluster_->zmq_endpoint());
  uint64_t id = 7000;
  for (const char* key : {"n", "best_of", "echo", "suffix"}) {
    SCOPED_TRACE(key);
    Map m = completion(++id, "Once upon a time").add("stream", false);
    if (std::string(key) == "echo") m.add(key, true);
    else if (std::string(key) == "suffix") m.add(key, "x");
    else m.add(key, int64_t{1});
    c.send(m.bytes());
    auto replies = c.until_end(id);
    ASSERT_EQ(replies.size(), 1u);
    auto* err = std::get_if<protocol::ErrorEvent>(&replies.back().msg);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(err->code, ErrorCode::kUnsupported);
    EXPECT_EQ(err->message.rfind(std::string(key) + " is not a field of the ZeroMQ API", 0), 0u) << err->message;
  }
  c.send(completion(++id, "Once upon a time").add("stream", false).add("max_tokens", int64_t{3}).bytes());
  auto replies = c.until_end(id);
  ASSERT_FALSE(replies.empty());
  EXPECT_TRUE(std::holds_alternative<protocol::FinalEvent>(replies.back().msg));
}

}  // namespace
}  // namespace tessera::testing::cluster_test
