// Conformance of clients/cpp (tessera::client) against a real `tessera up` cluster on
// stories260K — the same cases as the Python suite (python_client_test.py, issue 13): greedy
// text equals the HTTP API's on greedy.json, streaming equals non-streaming, 32 concurrent
// requests on one client, cancel mid-stream frees the request (scheduler held pages back to
// baseline), deadline expiry, bad requests raise the right typed error, limits() from the
// heartbeat reply, no frontend never hangs, and a killed frontend is detected within the
// documented bound with failover to a second frontend (last: it kills that frontend).
#include <signal.h>

#include <atomic>
#include <future>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <stdlib.h>

#include "tessera/client/admin.h"
#include "tessera/client/client.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/wait.h"
#include "up_cluster.h"

namespace tessera::testing {
namespace {

namespace tc = tessera::client;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kBound = tc::kDefaultDeadAfter + tc::kDefaultHeartbeatInterval;

class CppClient : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new UpCluster(/*second_frontend=*/true); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(cluster_ && cluster_->ok()) << "the cluster did not come up";
    client_ = std::make_unique<tc::Client>(cluster_->zmq_endpoint());
  }
  double held_pages() { return cluster_->metric("tessera_scheduler_pages", "state=\"held\""); }

  static inline UpCluster* cluster_ = nullptr;
  std::unique_ptr<tc::Client> client_;
};

TEST_F(CppClient, A_GreedyTextEqualsHttp) {
  for (const GreedyCase& c : greedy_cases()) {
    SCOPED_TRACE(c.prompt);
    nlohmann::json body = {{"prompt", c.prompt}, {"max_tokens", c.steps}, {"temperature", 0}, {"ignore_eos", true}};
    auto http = cluster_->http_post("/v1/completions", body.dump());
    ASSERT_TRUE(http.ok() && http->status == 200) << (http.ok() ? http->body : http.error().to_string());
    const std::string http_text = nlohmann::json::parse(http->body)["choices"][0]["text"];
    tc::Completion r = client_->complete(c.prompt, {.max_tokens = c.steps, .temperature = 0.0, .ignore_eos = true});
    EXPECT_EQ(r.text, http_text);
    EXPECT_EQ(r.text.rfind(c.completion, 0), 0u) << r.text;
    EXPECT_EQ(r.finish_reason, "length");
    EXPECT_EQ(r.usage.completion_tokens, c.steps);
    EXPECT_EQ(static_cast<int>(r.tokens.size()), c.steps);
    EXPECT_GT(r.usage.prompt_tokens, 0);
    EXPECT_GE(r.timings.total_ms, 0.0);
    EXPECT_FALSE(r.logprobs.has_value());
    EXPECT_FALSE(r.usage.preference_source.has_value());
  }
}

TEST_F(CppClient, B_StreamingEqualsNonStreaming) {
  for (const GreedyCase& c : greedy_cases()) {
    SCOPED_TRACE(c.prompt);
    const tc::RequestOptions o{.max_tokens = c.steps, .temperature = 0.0, .logprobs = true, .ignore_eos = true};
    tc::Completion whole = client_->complete(c.prompt, o);
    std::vector<tc::StreamEvent> events;
    for (const auto& ev : client_->stream_complete(c.prompt, o)) events.push_back(ev);
    ASSERT_FALSE(events.empty());
    for (size_t i = 0; i + 1 < events.size(); ++i) EXPECT_TRUE(std::holds_alternative<tc::TokenEvent>(events[i]));
    ASSERT_TRUE(std::holds_alternative<tc::Completion>(events.back()));
    const auto& final = std::get<tc::Completion>(events.back());
    EXPECT_EQ(final.text, whole.text);
    EXPECT_EQ(final.tokens, whole.tokens);
    EXPECT_EQ(final.usage.completion_tokens, whole.usage.completion_tokens);
    ASSERT_TRUE(final.logprobs && whole.logprobs);
    EXPECT_EQ(static_cast<int>(final.logprobs->size()), c.steps);
    EXPECT_EQ(static_cast<int>(whole.logprobs->size()), c.steps);

    // The callback flavour gives the same events and Completion.
    std::promise<tc::Completion> done;
    std::string text;  // touched only on the I/O thread until `done` is set
    client_->start_complete(c.prompt, o,
                            {.on_token = [&](const tc::TokenEvent& t) { text += t.text; },
                             .on_final = [&](const tc::Completion& f) { done.set_value(f); },
                             .on_error = [&](const tc::Error& e) {
                               done.set_exception(std::make_exception_ptr(std::runtime_error(e.what())));
                             }});
    tc::Completion cb = done.get_future().get();
    EXPECT_EQ(cb.text, whole.text);
    EXPECT_EQ(text, whole.text);
  }
  EXPECT_FALSE(client_->complete("Once", {.max_tokens = 2}).logprobs.has_value());  // none unless asked
}

TEST_F(CppClient, C_Chat) {
  const std::vector<tc::ChatMessage> msgs{{.role = "user", .content = "Once upon a time"}};
  tc::Completion whole = client_->chat(msgs, {.max_tokens = 16, .temperature = 0.0});
  tc::Completion streamed = client_->stream_chat(msgs, {.max_tokens = 16, .temperature = 0.0}).result();
  EXPECT_EQ(whole.text, streamed.text);
  EXPECT_TRUE(whole.finish_reason == "stop" || whole.finish_reason == "length") << whole.finish_reason;
}

TEST_F(CppClient, D_ThirtyTwoConcurrentOnOneClient) {
  std::vector<std::string> prompts;
  for (int i = 0; i < 32; ++i) prompts.push_back((i % 2 ? "Lily and Tom " : "Once upon a time ") + std::to_string(i));
  const tc::RequestOptions o{.max_tokens = 48, .temperature = 0.0, .ignore_eos = true};
  std::vector<std::string> ref;
  for (int i = 0; i < 4; ++i) ref.push_back(client_->complete(prompts[i], o).text);

  // 32 threads, one stream each.
  std::vector<std::string> got(32);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 32; ++i)
    threads.emplace_back([&, i] {
      try {
        got[i] = client_->stream_complete(prompts[i], o).result().text;
      } catch (const tc::Error&) {
        ++errors;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], ref[i]);
  for (const auto& g : got) EXPECT_FALSE(g.empty());

  // 32 streams in flight from one thread, read afterwards.
  std::vector<tc::Stream> streams;
  for (const auto& p : prompts) streams.push_back(client_->stream_complete(p, o));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(streams[i].result().text, got[i]);
}

TEST_F(CppClient, E_CancelMidStreamFreesTheRequest) {
  ASSERT_TRUE(wait_until([&] { return held_pages() == 0.0; }, 10s));
  tc::Stream s = client_->stream_complete("Once upon a time", {.max_tokens = 400, .temperature = 0.0, .ignore_eos = true});
  auto first = s.next();
  ASSERT_TRUE(first && std::holds_alternative<tc::TokenEvent>(*first));
  s.cancel();
  tc::Completion final = s.result();
  EXPECT_EQ(final.finish_reason, "cancelled");
  EXPECT_LT(final.usage.completion_tokens, 400);
  EXPECT_TRUE(s.done());
  EXPECT_TRUE(wait_until([&] { return held_pages() == 0.0; }, 10s)) << "pages not freed after cancel";
  {
    tc::Stream dropped = client_->stream_complete("Once upon a time", {.max_tokens = 400, .ignore_eos = true});
    ASSERT_TRUE(dropped.next().has_value());
  }  // destroyed mid-way (as by a `break`): cancelled
  EXPECT_TRUE(wait_until([&] { return held_pages() == 0.0; }, 10s)) << "pages not freed after dropping a stream";
}

TEST_F(CppClient, F_DeadlineRaisesTimeout) {
  const auto t0 = Clock::now();
  try {
    for (const auto& ev : client_->stream_complete("Once upon a time",
                                                   {.max_tokens = 400, .temperature = 0.0, .ignore_eos = true,
                                                    .timeout = 5ms}))
      (void)ev;
    ADD_FAILURE() << "no Timeout";
  } catch (const tc::Timeout& e) {
    EXPECT_EQ(e.code(), 203);
    EXPECT_EQ(e.name(), "deadline_exceeded");
  }
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_TRUE(wait_until([&] { return held_pages() == 0.0; }, 10s)) << "pages not freed after a deadline";
  tc::Client short_deadline(tc::ClientOptions{.endpoints = {cluster_->zmq_endpoint()}, .timeout = 5ms});
  EXPECT_THROW(short_deadline.complete("Once upon a time", {.max_tokens = 400, .ignore_eos = true}), tc::Timeout);
  EXPECT_EQ(client_->complete("Once", {.max_tokens = 3}).usage.completion_tokens, 3);  // still serving
}

TEST_F(CppClient, G_BadRequestsRaiseTypedErrors) {
  struct Check {
    std::string what;
    std::function<void(bool stream)> call;
    int code;
    bool not_found = false;
  };
  auto run = [&](auto prompt, tc::RequestOptions o) {
    return [this, prompt, o](bool stream) {
      if (stream)
        client_->stream_complete(prompt, o).result();
      else
        client_->complete(prompt, o);
    };
  };
  const std::vector<Check> checks = {
      {"max_tokens 0", run(std::string("Once"), {.max_tokens = 0}), 103},
      {"temperature 5", run(std::string("Once"), {.temperature = 5.0}), 103},
      {"empty prompt", run(std::string(""), {}), 100},
      {"unknown model", run(std::string("Once"), {.model = "no-such-model"}), 104, true},
      {"max_tokens over the context", run(std::string("Once"), {.max_tokens = 100000}), 105},
      {"token outside the vocabulary", run(std::vector<int32_t>{100000}, {}), 103},
  };
  for (const auto& c : checks) {
    for (bool stream : {false, true}) {
      SCOPED_TRACE(c.what + (stream ? " (stream)" : ""));
      try {
        c.call(stream);
        ADD_FAILURE() << "no error";
      } catch (const tc::BadRequest& e) {
        EXPECT_EQ(e.code(), c.code) << e.what();
        EXPECT_FALSE(e.message().empty());
        EXPECT_EQ(e.name(), tc::error_code_name(c.code));
        EXPECT_EQ(dynamic_cast<const tc::NotFound*>(&e) != nullptr, c.not_found);
      }
    }
  }
  EXPECT_THROW(client_->chat({{.role = "robot", .content = "hi"}}), tc::BadRequest);
  EXPECT_THROW(tc::Client(tc::ClientOptions{.endpoints = {}}), tc::BadRequest);
  EXPECT_THROW(tc::Client(tc::ClientOptions{.heartbeat_interval = 2s, .dead_after = 1s}), tc::BadRequest);
  EXPECT_THROW(tc::Client(tc::ClientOptions{.server_public_key = "too-short"}), tc::BadRequest);
}

// Typed kv_policy: the same greedy text as the HTTP API's JSON form (with its defaults), streamed
// and not; the policy takes effect; out of range is BadRequest 103 naming kv_policy.
TEST_F(CppClient, G2_KvPolicyTypedFields) {
  const std::string prompt = "Once upon a time";
  const std::pair<tc::KvPolicy, nlohmann::json> cases[] = {
      {tc::StreamingPolicy{.window = 24}, {{"type", "streaming"}, {"window", 24}}},
      {tc::H2OPolicy{.budget = 24}, {{"type", "h2o"}, {"budget", 24}}},
      {tc::H2OPolicy{.budget = 24, .recent = 12}, {{"type", "h2o"}, {"budget", 24}}},
      {tc::FullAttention{}, {{"type", "none"}}},
  };
  for (const auto& [typed, json_form] : cases) {
    SCOPED_TRACE(json_form.dump());
    nlohmann::json body = {{"prompt", prompt}, {"max_tokens", 48}, {"temperature", 0}, {"ignore_eos", true},
                           {"kv_policy", json_form}};
    auto http = cluster_->http_post("/v1/completions", body.dump());
    ASSERT_TRUE(http.ok() && http->status == 200) << (http.ok() ? http->body : http.error().to_string());
    const std::string want = nlohmann::json::parse(http->body)["choices"][0]["text"];
    const tc::RequestOptions o{.max_tokens = 48, .temperature = 0.0, .ignore_eos = true, .kv_policy = typed};
    const tc::Completion r = client_->complete(prompt, o);
    EXPECT_EQ(r.text, want);
    EXPECT_EQ(r.usage.completion_tokens, 48);
    EXPECT_EQ(client_->stream_complete(prompt, o).result().text, want);
  }
  const auto full = client_->complete(prompt, {.max_tokens = 48, .temperature = 0.0, .ignore_eos = true});
  const auto window = client_->complete(prompt, {.max_tokens = 48, .temperature = 0.0, .ignore_eos = true,
                                                 .kv_policy = tc::StreamingPolicy{.window = 8, .sinks = 1}});
  EXPECT_NE(window.tokens, full.tokens);  // the policy took effect
  try {
    client_->complete(prompt, {.max_tokens = 4, .kv_policy = tc::StreamingPolicy{.window = 100000}});
    ADD_FAILURE() << "no error";
  } catch (const tc::BadRequest& e) {
    EXPECT_EQ(e.code(), 103) << e.what();
    EXPECT_NE(e.message().find("kv_policy"), std::string::npos) << e.what();
  }
  EXPECT_EQ(client_->complete("Once", {.max_tokens = 3}).usage.completion_tokens, 3);
}

TEST_F(CppClient, H_LimitsFromHeartbeat) {
  tc::Limits lim = client_->limits();
  EXPECT_EQ(lim.protocol_version, 1);
  EXPECT_EQ(lim.vocab_size.value_or(0), 512);
  EXPECT_GT(lim.context_length.value_or(0), 0);
  EXPECT_GT(lim.page_size.value_or(0), 0);
  EXPECT_GT(lim.default_max_tokens.value_or(0), 0);
  EXPECT_GT(lim.live_workers, 0);
  EXPECT_EQ(lim.endpoint, cluster_->zmq_endpoint());
}

TEST_F(CppClient, J_NoFrontendNeverHangs) {
  tc::Client c(tc::ClientOptions{.endpoints = {"tcp://127.0.0.1:9"}});  // discard port: nothing listens
  const auto t0 = Clock::now();
  EXPECT_THROW(c.complete("Once", {.max_tokens = 4}), tc::PeerDead);
  EXPECT_LT(Clock::now() - t0, kBound + 1s);
  EXPECT_THROW(c.limits(200ms), tc::Unavailable);
  c.close();
  EXPECT_THROW(c.complete("Once"), tc::ClientClosed);  // after close: at once, never a hang
}

TEST_F(CppClient, Z_KilledFrontendDetectedAndFailover) {
  tc::Client c(tc::ClientOptions{.endpoints = {cluster_->second_zmq_endpoint(), cluster_->zmq_endpoint()}});
  EXPECT_EQ(c.complete("Once", {.max_tokens = 4}).usage.completion_tokens, 4);
  EXPECT_EQ(c.endpoint(), cluster_->second_zmq_endpoint());
  cluster_->second_frontend().signal(SIGKILL);
  const auto t0 = Clock::now();
  try {
    c.complete("Once upon a time", {.max_tokens = 8});
    ADD_FAILURE() << "no PeerDead";
  } catch (const tc::PeerDead& e) {
    EXPECT_EQ(e.code(), 401);
  }
  EXPECT_LE(Clock::now() - t0, kBound + 500ms) << "dead frontend noticed too late";
  EXPECT_TRUE(wait_until([&] { return c.failovers() >= 1; }, std::chrono::duration_cast<milliseconds>(kBound)));
  EXPECT_EQ(c.endpoint(), cluster_->zmq_endpoint());
  tc::Completion r = c.complete("Once upon a time", {.max_tokens = 64, .temperature = 0.0, .ignore_eos = true});
  EXPECT_EQ(r.text.rfind(greedy_cases()[0].completion.substr(0, 40), 0), 0u) << r.text;
}

// The admin operations (AdminClient over the frontend's HTTP admin routes), on a cluster with a
// kvstore and an admin token: set / get / delete a stored preference, a request of that user
// uses it (its provenance in Usage), invalidate, and the typed errors.
class CppClientAdmin : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("TESSERA_ADMIN_TOKEN", "s3cret", 1);  // the frontend's --admin-token, inherited
    cluster_ = new UpCluster(/*second_frontend=*/false, /*kvstore=*/true);
    ::unsetenv("TESSERA_ADMIN_TOKEN");
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_ && cluster_->ok()) << "the cluster did not come up"; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(cluster_->http_port()); }
  static inline UpCluster* cluster_ = nullptr;
};

TEST_F(CppClientAdmin, PreferenceSetGetUseInvalidateDelete) {
  tc::AdminClient admin(url(), {.token = "s3cret"});
  const std::string user = "bob smith/1";  // percent-encoded in the path
  tc::StoredPreference set = admin.set_preference(user, "Bob likes short stories about dragons.", 0.4);
  EXPECT_EQ(set.user, user);
  EXPECT_EQ(set.preference, "Bob likes short stories about dragons.");
  EXPECT_NEAR(set.alpha, 0.4, 1e-6);  // stored as a float
  tc::StoredPreference got = admin.get_preference(user);
  EXPECT_EQ(got.preference, set.preference);
  EXPECT_NEAR(got.alpha, 0.4, 1e-6);

  tc::Client client(cluster_->zmq_endpoint());
  tc::Completion r = client.complete("Once upon a time", {.max_tokens = 4, .user = user});
  ASSERT_TRUE(r.usage.preference_source.has_value()) << "the stored preference was not used";
  EXPECT_GT(r.usage.preference_kv_bytes.value_or(0), 0);

  tc::Invalidation inv = admin.invalidate(user);
  EXPECT_EQ(inv.user, user);
  EXPECT_EQ(inv.schedulers_notified, 1);
  EXPECT_TRUE(admin.delete_preference(user));
  EXPECT_FALSE(admin.delete_preference(user));
  try {
    admin.get_preference(user);
    ADD_FAILURE() << "no NotFound";
  } catch (const tc::NotFound& e) {
    EXPECT_EQ(e.code(), 104);
  }
  EXPECT_THROW(admin.set_preference(user, "x", 3.0), tc::BadRequest);
  tc::AdminClient wrong(url(), {.token = "wrong"});
  try {
    wrong.get_preference(user);
    ADD_FAILURE() << "no PermissionDenied";
  } catch (const tc::PermissionDenied& e) {
    EXPECT_EQ(e.code(), 106);
  }
  EXPECT_THROW(tc::AdminClient("https://127.0.0.1:1"), tc::BadRequest);
  EXPECT_THROW(tc::AdminClient("http://127.0.0.1:9", {.token = "s3cret"}).get_preference(user), tc::Unavailable);
}

}  // namespace
}  // namespace tessera::testing
