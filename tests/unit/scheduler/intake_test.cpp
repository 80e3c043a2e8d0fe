// Intake scenarios: what a decoded generate request must satisfy, and the K/V namespace it gets
// (prefix cache on/off, preference alpha rule, per-user epochs after invalidate).
#include "tessera/scheduler/intake.h"

#include <gtest/gtest.h>

#include <string>

#include "tessera/common/dki.h"
#include "tessera/scheduler/router.h"
#include "tessera/testing/scenario.h"

namespace tessera::scheduler {
namespace {

using tessera::testing::Scenario;

constexpr WorkerFacts kFacts{.vocab_size = 100, .model_fingerprint = 0xabcdef0123456789ull};

protocol::GenerateRequest prompt(std::vector<int32_t> tokens) {
  protocol::GenerateRequest r;
  r.id = 7;
  r.prompt_tokens = std::move(tokens);
  r.max_tokens = 5;
  return r;
}

protocol::GenerateRequest with_preference(std::string user, float alpha) {
  protocol::GenerateRequest r = prompt({1, 2, 3});
  r.user = std::move(user);
  r.preference = "likes tea";
  r.preference_tokens = {10, 11, 12, 13};
  r.preference_alpha = alpha;
  return r;
}

void expect_invalid(const Result<Admission>& a, const std::string& names) {
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(a.error().message.find(names), std::string::npos) << a.error().message;
}

TEST(Intake, RefusesRequestsTheModelCannotServe) {
  Intake intake;
  Scenario("token ids outside the vocabulary")
      .Then("a prompt token >= vocab is refused, naming its index", [&] {
        expect_invalid(intake.admit(prompt({1, 100}), 1, kFacts), "prompt_tokens[1] = 100");
      })
      .And("a negative prompt token is refused", [&] {
        expect_invalid(intake.admit(prompt({-1}), 1, kFacts), "prompt_tokens[0] = -1");
      })
      .And("a bad preference token is refused", [&] {
        auto r = with_preference("ann", 0.5f);
        r.preference_tokens[2] = 5000;
        expect_invalid(intake.admit(r, 1, kFacts), "preference_tokens[2] = 5000");
      })
      .And("with an unknown vocabulary (0) only negative ids are refused", [&] {
        EXPECT_TRUE(intake.admit(prompt({1, 100000}), 1, WorkerFacts{}).ok());
        expect_invalid(intake.admit(prompt({-3}), 1, WorkerFacts{}), "prompt_tokens[0]");
      });
  Scenario("empty and oversized fields")
      .Then("an empty prompt is refused", [&] { expect_invalid(intake.admit(prompt({}), 1, kFacts), "prompt_tokens is empty"); })
      .And("a preference without its tokens is refused", [&] {
        auto r = with_preference("ann", 0.5f);
        r.preference_tokens.clear();
        expect_invalid(intake.admit(r, 1, kFacts), "preference_tokens is empty");
      })
      .And("a user id over dki::kMaxUserBytes is refused; exactly the limit is fine", [&] {
        auto r = prompt({1});
        r.user = std::string(dki::kMaxUserBytes + 1, 'u');
        expect_invalid(intake.admit(r, 1, kFacts), "user has 257 bytes");
        r.user.pop_back();
        EXPECT_TRUE(intake.admit(r, 1, kFacts).ok());
      });
}

TEST(Intake, BuildsThePlainRequestAndItsNamespace) {
  Intake intake;
  auto r = prompt({4, 5, 6});
  r.max_tokens = 9;
  r.stop_token_ids = {3};
  r.ignore_eos = true;
  r.priority = 4;
  r.routing_key = "session-1";
  auto a = intake.admit(r, 42, kFacts);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  const Request& q = a->request;
  EXPECT_EQ(q.id, 42u);
  EXPECT_EQ(q.prompt, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(q.max_tokens, 9);
  EXPECT_EQ(q.stop_ids, (std::vector<int32_t>{3}));
  EXPECT_TRUE(q.ignore_eos);
  EXPECT_EQ(q.priority, 4);
  EXPECT_EQ(q.routing_key, "session-1");
  EXPECT_EQ(q.ns.model_fingerprint, "abcdef0123456789");
  EXPECT_EQ(q.ns.tenant_salt, "");
  EXPECT_EQ(q.ns.user, "");
  EXPECT_FALSE(q.preference);
  EXPECT_FALSE(a->has_preference);
}

TEST(Intake, PrefixCacheOffGivesEveryRequestItsOwnNamespace) {
  Intake shared, isolated(IntakeConfig{.prefix_cache = false});
  Request a, b, c, d;
  Scenario("prefix cache off")
      .Given("two identical requests admitted by each intake", [&] {
        a = shared.admit(prompt({1, 2}), 1, kFacts)->request;
        b = shared.admit(prompt({1, 2}), 2, kFacts)->request;
        c = isolated.admit(prompt({1, 2}), 1, kFacts)->request;
        d = isolated.admit(prompt({1, 2}), 2, kFacts)->request;
      })
      .Then("with the cache on they share one namespace", [&] { EXPECT_EQ(a.ns, b.ns); })
      .And("with it off each has a per-request salt", [&] {
        EXPECT_EQ(c.ns.tenant_salt, "no-prefix-cache:1");
        EXPECT_EQ(d.ns.tenant_salt, "no-prefix-cache:2");
        EXPECT_NE(c.ns, d.ns);
      });
}

TEST(Intake, TenantAndCacheSaltScopeThePrefixCache) {
  Intake shared, isolated(IntakeConfig{.prefix_cache = false});
  auto ns_of = [&](const Intake& in, std::string tenant, std::string cache_salt, uint64_t id = 1) {
    protocol::GenerateRequest r = prompt({1, 2});
    r.tenant = std::move(tenant);
    r.cache_salt = std::move(cache_salt);
    return in.admit(std::move(r), id, kFacts)->request.ns;
  };
  // The default tenant without a salt keeps today's namespace (and routing seed 0).
  EXPECT_EQ(ns_of(shared, "", "").tenant_salt, "");
  EXPECT_EQ(ns_of(shared, "default", "").tenant_salt, "");
  EXPECT_EQ(ns_of(shared, "a", ""), ns_of(shared, "a", "", 2)) << "one tenant shares";
  EXPECT_NE(ns_of(shared, "a", ""), ns_of(shared, "b", ""));
  EXPECT_NE(ns_of(shared, "a", ""), ns_of(shared, "", ""));
  EXPECT_NE(ns_of(shared, "a", "s"), ns_of(shared, "a", ""));
  EXPECT_EQ(ns_of(shared, "a", "s"), ns_of(shared, "a", "s", 2));
  EXPECT_NE(ns_of(shared, "default", "s").tenant_salt, "");
  // Length prefixes: no (tenant, salt) pair spells another's.
  EXPECT_NE(Intake::tenant_salt("a|cache_salt:1:b", ""), Intake::tenant_salt("a", "b"));
  // The prefix cache off still wins: a salt per request.
  EXPECT_EQ(ns_of(isolated, "a", "s", 5).tenant_salt, "no-prefix-cache:5");
  protocol::GenerateRequest big = prompt({1});
  big.cache_salt.assign(protocol::kMaxCacheSaltBytes + 1, 'x');
  expect_invalid(shared.admit(big, 1, kFacts), "cache_salt");
  big = prompt({1});
  big.tenant.assign(protocol::kMaxTenantBytes + 1, 't');
  expect_invalid(shared.admit(big, 1, kFacts), "tenant");
}

TEST(Intake, PreferenceFollowsTheAlphaRule) {
  Intake intake;
  Scenario("alpha <= 0.1 means no preference at all")
      .Then("alpha 0.1 and 0 give a plain request", [&] {
        for (float alpha : {0.1f, 0.0f}) {
          auto a = intake.admit(with_preference("ann", alpha), 1, kFacts);
          ASSERT_TRUE(a.ok());
          EXPECT_FALSE(a->request.preference) << alpha;
          EXPECT_FALSE(a->has_preference);
          EXPECT_EQ(a->request.ns.user, "");
          EXPECT_EQ(a->request.ns.preference_hash, 0u);
        }
      });
  Scenario("alpha above 0.1 plans a fill")
      .Then("the namespace carries user, content hash and the capped alpha; the fill its blob key", [&] {
        auto a = intake.admit(with_preference("ann", 0.9f), 3, kFacts);
        ASSERT_TRUE(a.ok());
        const Request& q = a->request;
        ASSERT_TRUE(q.preference);
        EXPECT_TRUE(a->has_preference);
        const uint64_t hash = dki::preference_hash(std::vector<int32_t>{10, 11, 12, 13}, kFacts.model_fingerprint);
        EXPECT_EQ(q.ns.user, "ann");
        EXPECT_EQ(q.ns.preference_hash, hash);
        EXPECT_FLOAT_EQ(q.ns.alpha, dki::kAlphaCap);
        EXPECT_EQ(q.preference->blob_key, dki::make_blob_key("ann", hash));
        EXPECT_EQ(q.preference->num_tokens, 4);
        EXPECT_FLOAT_EQ(q.preference->alpha, dki::kAlphaCap);
        EXPECT_EQ(q.preference->tokens, (std::vector<int32_t>{10, 11, 12, 13}));
      })
      .And("an anonymous preference gets a private namespace and a do-not-cache blob key", [&] {
        auto a = intake.admit(with_preference("", 0.5f), 8, kFacts);
        ASSERT_TRUE(a.ok());
        EXPECT_EQ(a->request.ns.user, "\x01" "anonymous:8");
        EXPECT_EQ(a->request.preference->blob_key,
                  dki::make_blob_key("", a->request.ns.preference_hash));
      });
}

TEST(Intake, InvalidateGivesTheUserANewNamespace) {
  Intake intake;
  Request before, after, other;
  Scenario("invalidate_user")
      .Given("ann's preference request before an invalidate", [&] {
        before = intake.admit(with_preference("ann", 0.5f), 1, kFacts)->request;
        EXPECT_EQ(intake.epoch("ann"), 0u);
      })
      .When("ann is invalidated", [&] { EXPECT_EQ(intake.invalidate_user("ann"), 1u); })
      .Then("the same request lands in a new namespace (old pages never match)", [&] {
        after = intake.admit(with_preference("ann", 0.5f), 2, kFacts)->request;
        EXPECT_EQ(after.ns.tenant_salt, "|pref-epoch:1");
        EXPECT_NE(before.ns, after.ns);
        EXPECT_EQ(after.preference->blob_key, before.preference->blob_key);  // the kvstore blob is the same content
      })
      .And("other users keep theirs", [&] {
        other = intake.admit(with_preference("bob", 0.5f), 3, kFacts)->request;
        EXPECT_EQ(other.ns.tenant_salt, "");
      })
      .And("a second invalidate moves on again", [&] {
        EXPECT_EQ(intake.invalidate_user("ann"), 2u);
        EXPECT_EQ(intake.admit(with_preference("ann", 0.5f), 4, kFacts)->request.ns.tenant_salt, "|pref-epoch:2");
      });
}

}  // namespace
}  // namespace tessera::scheduler
