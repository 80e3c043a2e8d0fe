// Identity against a real cluster (issue 18 findings 3 and 4; docs/api.md "Authentication and
// tenants"): with API keys configured, requests without a valid bearer key get 401
// (authentication_error), a key naming a user it may not act for gets 403 naming only the user,
// the prefix cache is scoped per tenant (an identical long prompt from another tenant gets
// cached_tokens 0, the same tenant's second request a hit), cache_salt isolates inside a
// tenant, and the ZeroMQ client API takes the key in its api_key field.
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <tuple>

#include <gtest/gtest.h>
#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/paths.h"

namespace tessera::testing::cluster_test {
namespace {

using nlohmann::json;

class ClusterIdentity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(make_temp_dir("tessera-identity"));
    const std::string keys = *dir_ + "/keys";
    std::ofstream(keys) << "# test keys\n"
                           "key-a   tenant-a alice,bob\n"
                           "key-a2  tenant-a *\n"
                           "\n"
                           "key-b   tenant-b carol\n";
    ClusterOptions o;
    o.max_prompt_tokens = 1000;
    o.frontend_args = {"--api-keys-file", keys, "--api-key", "key-default"};
    cluster_ = new Cluster(o);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override { ASSERT_TRUE(cluster_->ok()); }

  static Result<http::Response> post(const std::string& path, const json& body, std::optional<std::string> authorization) {
    http::Request r{.port = cluster_->http_port(), .method = "POST", .path = path, .body = body.dump(), .timeout_ms = 30000};
    if (authorization) r.headers.emplace_back("Authorization", *authorization);
    return http::request(r);
  }
  static json completion(const std::string& prompt) { return {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}}; }
  // cached_tokens of a 200 completion (fails the test otherwise; -1 then).
  static int cached(const json& body, const std::string& key) {
    auto r = post("/v1/completions", body, "Bearer " + key);
    if (!r.ok() || r->status != 200) {
      ADD_FAILURE() << (r.ok() ? r->body : r.error().to_string());
      return -1;
    }
    const json u = json::parse(r->body).at("usage");
    EXPECT_GT(u.at("prompt_tokens").get<int>(), 64) << u.dump();
    return u.at("prompt_tokens_details").at("cached_tokens").get<int>();
  }

  static Cluster* cluster_;
  static std::string* dir_;
};

Cluster* ClusterIdentity::cluster_ = nullptr;
std::string* ClusterIdentity::dir_ = nullptr;

void expect_error(const Result<http::Response>& r, int status, const std::string& type, const std::string& code) {
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->status, status) << r->body;
  const json e = json::parse(r->body).at("error");
  EXPECT_EQ(e.at("type"), type) << r->body;
  EXPECT_EQ(e.at("code"), code) << r->body;
}

TEST_F(ClusterIdentity, MissingInvalidOrNonBearerKeysGet401) {
  const json body = completion("Once upon a time");
  expect_error(post("/v1/completions", body, std::nullopt), 401, "authentication_error", "invalid_api_key");
  expect_error(post("/v1/completions", body, "Bearer wrong-key"), 401, "authentication_error", "invalid_api_key");
  expect_error(post("/v1/completions", body, "key-a"), 401, "authentication_error", "invalid_api_key");
  expect_error(post("/v1/completions", body, "Basic key-a"), 401, "authentication_error", "invalid_api_key");
  expect_error(post("/v1/completions", body, "Bearer "), 401, "authentication_error", "invalid_api_key");
  auto models = http::request({.port = cluster_->http_port(), .path = "/v1/models"});
  ASSERT_TRUE(models.ok());
  EXPECT_EQ(models->status, 401) << models->body;
  // Probes stay open.
  auto health = cluster_->get("/health");
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200);
  for (const char* key : {"key-a", "key-a2", "key-b", "key-default"}) {
    auto ok = post("/v1/completions", body, std::string("Bearer ") + key);
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(ok->status, 200) << key << ": " << ok->body;
  }
}

TEST_F(ClusterIdentity, AKeyCannotUseAnotherTenantsUser) {
  json body = completion("Once upon a time");
  body["user"] = "alice";
  auto allowed = post("/v1/completions", body, "Bearer key-a");
  ASSERT_TRUE(allowed.ok());
  EXPECT_EQ(allowed->status, 200) << allowed->body;
  // key-b may act for carol only: alice (another tenant's user) and a user nobody has are
  // refused alike — the answer names the user and nothing about a stored preference.
  auto other = post("/v1/completions", body, "Bearer key-b");
  expect_error(other, 403, "permission_error", "user_not_allowed");
  json unknown_body = body;
  unknown_body["user"] = "zed";
  auto unknown = post("/v1/completions", unknown_body, "Bearer key-b");
  expect_error(unknown, 403, "permission_error", "user_not_allowed");
  json e1 = json::parse(other->body).at("error"), e2 = json::parse(unknown->body).at("error");
  EXPECT_NE(e1.at("message").get<std::string>().find("'alice'"), std::string::npos) << e1.dump();
  std::string m2 = e2.at("message").get<std::string>();
  m2.replace(m2.find("'zed'"), 5, "'alice'");
  EXPECT_EQ(e1.at("message").get<std::string>(), m2);
  EXPECT_EQ(e1.dump().find("preference"), std::string::npos) << e1.dump();
  // A client-given preference with a foreign user is refused too (never injected).
  body["preference"] = "Tell stories about dragons.";
  expect_error(post("/v1/chat/completions",
                    json{{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})}, {"user", "alice"},
                         {"preference", "x"}, {"max_tokens", 2}},
                    "Bearer key-b"),
               403, "permission_error", "user_not_allowed");
  // '*' and --api-key may name any user.
  body.erase("preference");
  for (const char* key : {"key-a2", "key-default"}) {
    auto any = post("/v1/completions", body, std::string("Bearer ") + key);
    ASSERT_TRUE(any.ok());
    EXPECT_EQ(any->status, 200) << key << ": " << any->body;
  }
}

TEST_F(ClusterIdentity, PrefixCacheIsScopedPerTenantAndCacheSalt) {
  std::string prompt = "The vault combination is 6 2 9 3 and only the owner knows it.";
  while (prompt.size() < 450) prompt += " The little fox ran across the green field to find her friend the owl.";
  const json body = completion(prompt);
  ASSERT_GE(cached(body, "key-a"), 0);         // tenant-a fills the cache
  EXPECT_EQ(cached(body, "key-b"), 0);         // another tenant: nothing shared
  EXPECT_EQ(cached(body, "key-default"), 0);   // the default tenant neither
  EXPECT_GT(cached(body, "key-a2"), 0);        // the same tenant, another key: shared
  json salted = body;
  salted["cache_salt"] = "private-1";
  EXPECT_EQ(cached(salted, "key-a"), 0);       // cache_salt: isolated inside the tenant...
  EXPECT_GT(cached(salted, "key-a2"), 0);      // ...and shared with the same salt
  salted["cache_salt"] = "";
  expect_error(post("/v1/completions", salted, "Bearer key-a"), 400, "invalid_request_error", "invalid_argument");
}

class Zmq {
 public:
  explicit Zmq(const std::string& endpoint) : sock_(ctx_, zmq::socket_type::dealer) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.set(zmq::sockopt::rcvtimeo, 20000);
    sock_.connect(endpoint);
  }
  // Sends a completion (api_key / user when non-empty) and returns its final or error event.
  std::optional<protocol::Message> complete(uint64_t id, const std::string& api_key, const std::string& user) {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> p(buf);
    p.pack_map(6 + (api_key.empty() ? 0 : 1) + (user.empty() ? 0 : 1));
    auto kv = [&p](const char* k, const auto& v) {
      p.pack(k);
      p.pack(v);
    };
    kv("v", 1);
    kv("type", "completion");
    kv("id", id);
    kv("prompt", "Once upon a time");
    kv("max_tokens", 3);
    kv("stream", false);
    if (!api_key.empty()) kv("api_key", api_key);
    if (!user.empty()) kv("user", user);
    if (!zmqu::send(sock_, {std::string(buf.data(), buf.size())}).ok()) return std::nullopt;
    while (true) {
      auto frames = zmqu::recv(sock_);
      if (!frames.ok() || frames->empty()) return std::nullopt;
      auto m = protocol::decode(frames->back());
      if (!m.ok() || protocol::message_id(*m) != id) continue;
      if (std::holds_alternative<protocol::FinalEvent>(*m) || std::holds_alternative<protocol::ErrorEvent>(*m)) return *m;
    }
  }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t sock_;
};

void expect_zmq_error(const std::optional<protocol::Message>& m, const std::string& prefix) {
  ASSERT_TRUE(m.has_value());
  const auto* e = std::get_if<protocol::ErrorEvent>(&*m);
  ASSERT_NE(e, nullptr) << "expected an error event";
  EXPECT_EQ(e->code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(e->message.rfind(prefix, 0), 0u) << e->message;
}

TEST_F(ClusterIdentity, ZeroMqTakesTheKeyInApiKey) {
  Zmq z(cluster_->zmq_endpoint());
  expect_zmq_error(z.complete(1, "", ""), "invalid_api_key");
  expect_zmq_error(z.complete(2, "wrong", ""), "invalid_api_key");
  expect_zmq_error(z.complete(3, "key-b", "alice"), "user_not_allowed: ");
  for (auto [id, key, user] : {std::tuple<uint64_t, const char*, const char*>{4, "key-a", ""}, {5, "key-a", "alice"},
                               {6, "key-b", "carol"}, {7, "key-default", "anyone"}}) {
    auto m = z.complete(id, key, user);
    ASSERT_TRUE(m.has_value()) << id;
    EXPECT_TRUE(std::holds_alternative<protocol::FinalEvent>(*m)) << id;
  }
}

}  // namespace
}  // namespace tessera::testing::cluster_test
