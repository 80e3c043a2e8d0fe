// PeerLiveness (the one heartbeat rule) and the routing-key policy shared by frontend and
// scheduler.
#include <gtest/gtest.h>

#include <vector>

#include "tessera/common/hash.h"
#include "tessera/common/peer_liveness.h"
#include "tessera/common/routing.h"
#include "tessera/common/step_plan.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = PeerLiveness::Clock;

TEST(PeerLiveness, DeadExactlyOnceAfterSilenceAndAliveAgainWhenHeard) {
  const Clock::time_point t0{};
  PeerLiveness p({.interval = 100ms, .dead_after = 300ms}, t0);
  EXPECT_TRUE(p.alive());
  EXPECT_FALSE(p.check_dead(t0 + 300ms));  // not *more* than dead_after yet
  EXPECT_TRUE(p.check_dead(t0 + 301ms));
  EXPECT_FALSE(p.alive());
  EXPECT_FALSE(p.check_dead(t0 + 900ms));  // reported once
  p.heard(t0 + 950ms);
  EXPECT_TRUE(p.alive());
  EXPECT_DOUBLE_EQ(p.silent_ms(t0 + 1000ms), 50.0);
  EXPECT_FALSE(p.check_dead(t0 + 1250ms));
  EXPECT_TRUE(p.check_dead(t0 + 1251ms));
}

TEST(PeerLiveness, BeatsAreDueEveryInterval) {
  const Clock::time_point t0{};
  PeerLiveness p({.interval = 100ms, .dead_after = 300ms}, t0);
  EXPECT_TRUE(p.beat_due(t0));
  p.beat_sent(t0);
  EXPECT_FALSE(p.beat_due(t0 + 99ms));
  EXPECT_EQ(p.until_beat(t0 + 40ms), 60ms);
  EXPECT_TRUE(p.beat_due(t0 + 100ms));
  EXPECT_EQ(p.until_beat(t0 + 150ms), 0ms);
}

TEST(LivenessConfig, RejectsDeadAfterNotLongerThanInterval) {
  EXPECT_TRUE(LivenessConfig({.interval = 100ms, .dead_after = 101ms}).validate("x").ok());
  auto bad = LivenessConfig({.interval = 100ms, .dead_after = 100ms}).validate("--heartbeat-ms/--dead-ms");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("--heartbeat-ms/--dead-ms"), std::string::npos);
  EXPECT_FALSE(LivenessConfig({.interval = 0ms, .dead_after = 100ms}).validate("x").ok());
}

TEST(RoutingKey, ClientKeyThenUserThenPromptPrefix) {
  const std::vector<int32_t> prompt = {1, 2, 3};
  EXPECT_EQ(routing_key_for("conv-7", "alice", prompt), "conv-7");
  EXPECT_EQ(routing_key_for("", "alice", prompt), "user:alice");
  char want[32];
  std::snprintf(want, sizeof want, "prefix:%016llx", static_cast<unsigned long long>(prefix_routing_key(prompt, 64)));
  EXPECT_EQ(routing_key_for("", "", prompt), want);
}

TEST(RoutingKey, PromptsSharingTheirFirstTokensShareAKey) {
  std::vector<int32_t> a(100, 7), b(100, 7);
  b[80] = 9;  // differs after kRoutingPrefixTokens
  EXPECT_EQ(routing_key_for("", "", a), routing_key_for("", "", b));
  b[10] = 9;  // differs inside the prefix
  EXPECT_NE(routing_key_for("", "", a), routing_key_for("", "", b));
}

TEST(RoutingKey, HashIsSeededAndStable) {
  EXPECT_EQ(routing_hash("user:alice"), hash_combine(0, fnv1a64("user:alice")));
  EXPECT_NE(routing_hash("user:alice", 1), routing_hash("user:alice", 2));
  EXPECT_NE(routing_hash("user:alice"), routing_hash("user:bob"));
}

// The one rule for which backend capabilities sampling needs (worker refusal, scheduler placement).
TEST(SamplingCapabilities, NamesWhatEachOptionNeeds) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(required_sampling_capabilities({.temperature = 0.0f}), V{"greedy"});
  EXPECT_EQ(required_sampling_capabilities({.temperature = 0.7f, .top_k = 1}), V{"greedy"});
  EXPECT_EQ(required_sampling_capabilities({.temperature = 0.7f}), V{"temperature"});
  EXPECT_EQ(required_sampling_capabilities({.temperature = 0.7f, .top_p = 0.9f, .top_k = 40, .min_p = 0.05f}),
            (V{"temperature", "top_k", "top_p", "min_p"}));
  EXPECT_EQ(required_sampling_capabilities({.temperature = 0.0f, .presence_penalty = 0.5f, .logprobs = true}),
            (V{"greedy", "penalties", "logprobs"}));
  EXPECT_EQ(required_sampling_capabilities({.temperature = 0.0f, .top_logprobs = 3}), (V{"greedy", "logprobs"}));
}

}  // namespace
}  // namespace tessera
