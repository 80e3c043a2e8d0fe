// The DKI fields on the wire: KvFill.tokens in a step plan, StepResult.fills and Usage (provenance)
// survive encode/decode exactly; a negative preference token is refused naming the field.
#include <gtest/gtest.h>

#include <variant>

#include "tessera/common/protocol.h"

namespace tessera {
namespace {

TEST(PreferenceWire, FillTokensAndProvenanceRoundTrip) {
  protocol::StepPlanMsg pm;
  pm.id = 9;
  pm.plan.step_id = 9;
  pm.plan.fills.push_back(KvFill{7, "pref1:00000000000000ff:alice", {3, 4}, 20, 0.5f});
  pm.plan.fills.back().tokens = {1, 2, 3, 500, 0};
  auto dp = protocol::decode(protocol::encode(pm));
  ASSERT_TRUE(dp.ok()) << dp.error().to_string();
  const auto& plan = std::get<protocol::StepPlanMsg>(*dp).plan;
  ASSERT_EQ(plan.fills.size(), 1u);
  EXPECT_EQ(plan.fills[0].tokens, (std::vector<int32_t>{1, 2, 3, 500, 0}));
  EXPECT_EQ(plan.fills[0].blob_key, "pref1:00000000000000ff:alice");
  EXPECT_EQ(plan.fills[0].pages, (std::vector<int32_t>{3, 4}));

  protocol::StepResultMsg rm;
  rm.id = 9;
  rm.result.step_id = 9;
  rm.result.fills.push_back({.request_id = 7, .source = "redis", .kv_bytes = 2494058, .transfer_ms = 12.5, .compute_ms = 0.0});
  rm.result.fills.push_back({.request_id = 8, .source = "compute", .kv_bytes = 9216000, .transfer_ms = 0.0, .compute_ms = 2156.25});
  auto dr = protocol::decode(protocol::encode(rm));
  ASSERT_TRUE(dr.ok()) << dr.error().to_string();
  const auto& res = std::get<protocol::StepResultMsg>(*dr).result;
  ASSERT_EQ(res.fills.size(), 2u);
  EXPECT_EQ(res.fills[0].source, "redis");
  EXPECT_EQ(res.fills[0].kv_bytes, 2494058);
  EXPECT_EQ(res.fills[0].transfer_ms, 12.5);
  EXPECT_EQ(res.fills[1].request_id, 8u);
  EXPECT_EQ(res.fills[1].source, "compute");
  EXPECT_EQ(res.fills[1].compute_ms, 2156.25);

  pm.plan.fills.back().tokens[1] = -4;
  auto bad = protocol::decode(protocol::encode(pm));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("fills[0].tokens"), std::string::npos) << bad.error().message;
}

TEST(PreferenceWire, UsageProvenanceRoundTrip) {
  protocol::FinalEvent f{.id = 3, .finish_reason = "length"};
  f.usage.prompt_tokens = 5;
  f.usage.preference_source = "kvstore";
  f.usage.preference_kv_bytes = 12244;
  f.usage.preference_transfer_ms = 1.25;
  auto d = protocol::decode(protocol::encode(f));
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  const auto& u = std::get<protocol::FinalEvent>(*d).usage;
  EXPECT_EQ(u.preference_source, "kvstore");
  EXPECT_EQ(u.preference_kv_bytes, 12244);
  EXPECT_EQ(u.preference_transfer_ms, 1.25);
  EXPECT_EQ(u.prompt_tokens, 5);
}

}  // namespace
}  // namespace tessera
