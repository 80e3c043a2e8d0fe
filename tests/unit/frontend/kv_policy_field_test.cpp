// The request field kv_policy through parse_request (docs/api.md "K/V policies"): defaults,
// the flag that the field was given (the --kv-policy default applies only without it), and
// every refusal naming param kv_policy.
#include <gtest/gtest.h>

#include "tessera/frontend/openai.h"

namespace tessera::frontend {
namespace {

using protocol::RequestKind;

Result<ParsedRequest> parse(const std::string& policy, std::string* param) {
  return parse_request(R"({"prompt":"x","kv_policy":)" + policy + "}", RequestKind::kCompletion, {}, param);
}

TEST(KvPolicyField, DefaultsAndGivenFlag) {
  std::string param;
  auto s = parse(R"({"type":"streaming","window":64})", &param);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_TRUE(s->kv_policy_given);
  EXPECT_EQ(s->request.kv_policy, (KvPolicy{.type = KvPolicyType::kStreaming, .sinks = 4, .window = 64}));
  auto h = parse(R"({"type":"h2o","budget":100})", &param);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->request.kv_policy, (KvPolicy{.type = KvPolicyType::kH2O, .budget = 100, .recent = 50}));
  auto none = parse(R"({"type":"none"})", &param);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->kv_policy_given);
  EXPECT_EQ(none->request.kv_policy.type, KvPolicyType::kNone);
  auto absent = parse_request(R"({"prompt":"x"})", RequestKind::kCompletion, {}, &param);
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->kv_policy_given);
}

TEST(KvPolicyField, RefusalsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"("streaming")", "kv_policy must be an object"},
      {R"({"window":4})", "kv_policy.type must be"},
      {R"({"type":"lru"})", "kv_policy.type must be \"none\", \"streaming\" or \"h2o\" (got \"lru\")"},
      {R"({"type":"streaming"})", "kv_policy.window is required"},
      {R"({"type":"streaming","window":1.5})", "kv_policy.window must be an integer"},
      {R"({"type":"streaming","window":8,"sinks":-1})", "kv_policy.sinks must be >= 0"},
      {R"({"type":"h2o"})", "kv_policy.budget is required"},
      {R"({"type":"h2o","budget":8,"recent":8})", "kv_policy.recent must be in [0, budget)"},
      {R"({"type":"h2o","budget":8,"window":4})", "kv_policy.window is not a field of kv_policy type h2o"},
  };
  for (const auto& [body, want] : cases) {
    std::string param;
    auto r = parse(body, &param);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(param, "kv_policy") << body;
    EXPECT_NE(r.error().message.find(want), std::string::npos) << body << ": " << r.error().message;
  }
}

}  // namespace
}  // namespace tessera::frontend
