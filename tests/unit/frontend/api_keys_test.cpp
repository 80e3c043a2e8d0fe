// The API keys file parser and the key/user checks (frontend/include/tessera/frontend/api_keys.h).
#include "tessera/frontend/api_keys.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace tessera::frontend {
namespace {

// The principal of a successful authentication (an empty optional for a failure).
std::optional<Principal> principal(const std::variant<Principal, AuthFailure>& v) {
  if (const auto* p = std::get_if<Principal>(&v)) return *p;
  return std::nullopt;
}

void expect_bad(std::string_view text, const std::string& where, const std::string& what) {
  auto k = ApiKeys::parse(text, "keys.txt");
  ASSERT_FALSE(k.ok()) << text;
  EXPECT_EQ(k.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(k.error().message.rfind(where, 0), 0u) << k.error().message;
  EXPECT_NE(k.error().message.find(what), std::string::npos) << k.error().message;
}

TEST(ApiKeys, ParsesKeysTenantsAndUsers) {
  auto keys = ApiKeys::parse("# comment\n\nk1 acme alice,bob\r\n  k2\tacme  *\nk3 other\n", "keys.txt");
  ASSERT_TRUE(keys.ok()) << keys.error().to_string();
  EXPECT_TRUE(keys->enabled());
  EXPECT_EQ(keys->size(), 3u);
  const std::optional<Principal> p1 = principal(keys->authenticate("k1"));
  ASSERT_TRUE(p1.has_value());
  EXPECT_EQ(p1->tenant, "acme");
  EXPECT_TRUE(p1->may_act_for("alice"));
  EXPECT_TRUE(p1->may_act_for("bob"));
  EXPECT_FALSE(p1->may_act_for("carol"));
  EXPECT_TRUE(p1->may_act_for("")) << "no user is always allowed";
  const std::optional<Principal> p2 = principal(keys->authenticate("k2"));
  ASSERT_TRUE(p2.has_value());
  EXPECT_TRUE(p2->may_act_for("anyone"));
  const std::optional<Principal> p3 = principal(keys->authenticate("k3"));
  ASSERT_TRUE(p3.has_value());
  EXPECT_EQ(p3->tenant, "other");
  EXPECT_FALSE(p3->may_act_for("alice")) << "no user list: no user";
}

TEST(ApiKeys, BadLinesAreNamedByLineNumber) {
  expect_bad("k1 acme\nk2\n", "keys.txt line 2:", "no tenant");
  expect_bad("k1 acme a b\n", "keys.txt line 1:", "4 fields");
  expect_bad("# c\nk1 ac/me\n", "keys.txt line 2:", "tenant");
  expect_bad("k1 acme alice,,bob\n", "keys.txt line 1:", "empty user");
  expect_bad("k1 acme alice,*\n", "keys.txt line 1:", "'*' must stand alone");
  expect_bad("k1 acme\n\nk1 other\n", "keys.txt line 3:", "twice");
  expect_bad("k1 acme " + std::string(300, 'u') + "\n", "keys.txt line 1:", "bytes");
}

TEST(ApiKeys, AuthenticationNeedsABearerKeyOnlyWhenKeysExist) {
  ApiKeys open;
  EXPECT_FALSE(open.enabled());
  const std::optional<Principal> anyone = principal(open.authenticate_header(std::nullopt));
  ASSERT_TRUE(anyone.has_value());
  EXPECT_EQ(anyone->tenant, "default");
  EXPECT_TRUE(anyone->may_act_for("alice"));

  auto keys = ApiKeys::parse("k1 acme alice", "keys.txt");
  ASSERT_TRUE(keys.ok());
  for (std::optional<std::string_view> header : {std::optional<std::string_view>{}, std::optional<std::string_view>{"k1"},
                                                 std::optional<std::string_view>{"Basic k1"},
                                                 std::optional<std::string_view>{"Bearer k2"},
                                                 std::optional<std::string_view>{"Bearer "}}) {
    auto v = keys->authenticate_header(header);
    ASSERT_TRUE(std::holds_alternative<AuthFailure>(v)) << header.value_or("(none)");
    EXPECT_EQ(std::get<AuthFailure>(v).http_status, 401);
    EXPECT_EQ(std::get<AuthFailure>(v).code, "invalid_api_key");
  }
  EXPECT_TRUE(principal(keys->authenticate_header("Bearer k1")).has_value());
}

TEST(ApiKeys, AuthorizeBindsTheUserAndSetsTheTenant) {
  Principal p{.tenant = "acme", .any_user = false, .users = {"alice"}};
  protocol::GenerateRequest r;
  r.user = "alice";
  r.api_key = "secret";
  r.tenant = "forged";
  EXPECT_FALSE(ApiKeys::authorize(p, r).has_value());
  EXPECT_EQ(r.tenant, "acme") << "the client cannot choose its tenant";
  EXPECT_TRUE(r.api_key.empty()) << "the key never leaves the frontend";
  r.user = "bob";
  auto denied = ApiKeys::authorize(p, r);
  ASSERT_TRUE(denied.has_value());
  EXPECT_EQ(denied->http_status, 403);
  EXPECT_EQ(denied->code, "user_not_allowed");
  EXPECT_NE(denied->message.find("'bob'"), std::string::npos);
}

}  // namespace
}  // namespace tessera::frontend
