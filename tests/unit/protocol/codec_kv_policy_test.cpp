// K/V policies on the wire (docs/protocol.md, docs/kv.md): the request's kv_policy, a SeqPlan's
// rope_offset / moves / H2O fields and a SeqResult's victims round-trip, are omitted at their
// defaults, and are validated with errors naming the field.
#include <gtest/gtest.h>

#include "tessera/common/protocol.h"

namespace tessera::protocol {
namespace {

template <class T>
T round_trip(const T& in) {
  auto r = decode(encode(Message(in)));
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
  if (!r.ok() || !std::holds_alternative<T>(*r)) return T{};
  return std::get<T>(*r);
}

TEST(ProtocolKvPolicy, RequestPolicyRoundTripsAndIsValidated) {
  GenerateRequest in{.id = 2, .prompt = "x"};
  EXPECT_FALSE(peek_has_key(encode(in), "kv_policy")) << "omitted for none";
  in.kv_policy = {.type = KvPolicyType::kStreaming, .sinks = 4, .window = 256};
  EXPECT_EQ(round_trip(in).kv_policy, in.kv_policy);
  in.kv_policy = {.type = KvPolicyType::kH2O, .budget = 128, .recent = 32};
  EXPECT_EQ(round_trip(in).kv_policy, in.kv_policy);
  in.kv_policy = {.type = KvPolicyType::kH2O, .budget = 128, .recent = 128};
  auto bad = decode(encode(in));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kOutOfRange);
  EXPECT_NE(bad.error().message.find("kv_policy.recent must be in [0, budget) (got 128)"), std::string::npos)
      << bad.error().message;
  EXPECT_EQ(kv_policy_error({.type = KvPolicyType::kStreaming, .sinks = 4, .window = 510}, 512),
            "kv_policy: sinks + window (514) must be <= the context (512)");
}

TEST(ProtocolKvPolicy, PlanDirectivesAndVictimsRoundTrip) {
  StepPlan p{.step_id = 7};
  SeqPlan s{.request_id = 3, .tokens = {5}, .start_pos = 40, .block_table = {1, 2, 3, 4}, .slot_mapping = {3 * 16 + 8}};
  s.rope_offset = 12;
  s.moves = {{50, 9, 0}, {51, 10, -3}};
  s.h2o_recent = 8;
  s.h2o_victims = 2;
  s.sample = true;
  s.sampling.temperature = 0.0f;
  p.seqs.push_back(s);
  const SeqPlan out = round_trip(StepPlanMsg{.id = 7, .plan = p}).plan.seqs.at(0);
  EXPECT_EQ(out.rope_offset, 12);
  ASSERT_EQ(out.moves.size(), 2u);
  EXPECT_EQ(out.moves[1].src, 51);
  EXPECT_EQ(out.moves[1].dst, 10);
  EXPECT_EQ(out.moves[1].rope_delta, -3);
  EXPECT_EQ(out.h2o_recent, 8);
  EXPECT_EQ(out.h2o_victims, 2);
  StepPlan plain{.step_id = 8};
  plain.seqs.push_back(SeqPlan{.request_id = 3, .tokens = {5}, .block_table = {1}, .slot_mapping = {16}});
  const SeqPlan defaults = round_trip(StepPlanMsg{.id = 8, .plan = plain}).plan.seqs.at(0);
  EXPECT_EQ(defaults.h2o_recent, -1);
  EXPECT_TRUE(defaults.moves.empty());
  StepResult r{.step_id = 7};
  r.results.push_back(SeqResult{.request_id = 3, .token = 9, .victims = {4, 17}});
  EXPECT_EQ(round_trip(StepResultMsg{.id = 7, .result = r}).result.results.at(0).victims, (std::vector<int32_t>{4, 17}));
  p.seqs[0].moves = {{-1, 2, 0}};
  auto bad = decode(encode(Message(StepPlanMsg{.id = 7, .plan = p})));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("seqs[0].moves[0] has a negative cache index"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace tessera::protocol
