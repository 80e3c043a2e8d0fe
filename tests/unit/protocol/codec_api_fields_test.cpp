// The client-API fields of issue #11 on the wire: logit_bias, logprobs of a non-streamed final,
// the limits of a heartbeat; optional keys absent when empty; peek_has_key.
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

TEST(ProtocolApiFields, LogitBiasRoundTripsAndIsValidated) {
  GenerateRequest in;
  in.id = 3;
  in.prompt = "x";
  in.sampling.logit_bias = {{7, 5.0f}, {9, -100.0f}};
  EXPECT_EQ(round_trip(in).sampling.logit_bias, in.sampling.logit_bias);
  EXPECT_FALSE(peek_has_key(encode(GenerateRequest{.id = 1}), "logit_bias")) << "omitted when empty";
  in.sampling.logit_bias = {{7, 101.0f}};
  auto bad = decode(encode(in));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kOutOfRange);
  EXPECT_EQ(bad.error().message.rfind("logit_bias", 0), 0u) << bad.error().message;
}

TEST(ProtocolApiFields, GrammarRoundTripsAndIsValidated) {
  GenerateRequest in{.id = 5, .prompt = "x"};
  in.sampling.grammar = R"({"type":"object"})";
  in.sampling.grammar_end_tokens = {2, 7};
  in.sampling.grammar_max_tokens = 40;
  GenerateRequest out = round_trip(in);
  EXPECT_EQ(out.sampling.grammar, in.sampling.grammar);
  EXPECT_EQ(out.sampling.grammar_end_tokens, in.sampling.grammar_end_tokens);
  EXPECT_EQ(out.sampling.grammar_max_tokens, 40);
  for (const char* key : {"grammar", "grammar_end_tokens", "grammar_max_tokens"})
    EXPECT_FALSE(peek_has_key(encode(GenerateRequest{.id = 1, .prompt = "x"}), key)) << key << " omitted when empty";
  in.sampling.grammar.assign(kMaxGrammarBytes + 1, ' ');
  auto bad = decode(encode(in));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kTooLarge);
  EXPECT_NE(bad.error().message.find("grammar"), std::string::npos) << bad.error().message;
  EXPECT_EQ(required_sampling_capabilities(out.sampling).back(), "grammar");
}

TEST(ProtocolApiFields, IdentityFieldsRoundTripAndAreOptional) {
  GenerateRequest in{.id = 4, .prompt = "x", .api_key = "k", .tenant = "t", .cache_salt = "s"};
  GenerateRequest out = round_trip(in);
  EXPECT_EQ(out.api_key, "k");
  EXPECT_EQ(out.tenant, "t");
  EXPECT_EQ(out.cache_salt, "s");
  for (const char* key : {"api_key", "tenant", "cache_salt"})
    EXPECT_FALSE(peek_has_key(encode(GenerateRequest{.id = 1, .prompt = "x"}), key)) << key << " omitted when empty";
}

TEST(ProtocolApiFields, LogprobsOnlyWhenPresent) {
  EXPECT_FALSE(peek_has_key(encode(TokenEvent{.id = 1, .tokens = {4}}), "logprobs"));
  EXPECT_FALSE(peek_has_key(encode(TokenEvent{.id = 1, .tokens = {4}}), "top_logprobs"));
  FinalEvent f{.id = 2, .tokens = {4, 5}, .logprobs = {-0.5f, -1.0f}, .top_logprobs = {{{4, -0.5f}}, {{5, -1.0f}}}};
  FinalEvent out = round_trip(f);
  EXPECT_EQ(out.logprobs, f.logprobs);
  ASSERT_EQ(out.top_logprobs.size(), 2u);
  EXPECT_EQ(out.top_logprobs[1][0].token, 5);
  EXPECT_FALSE(peek_has_key(encode(FinalEvent{.id = 2}), "logprobs"));
  EXPECT_FALSE(peek_has_key(encode(FinalEvent{.id = 2}), "preference_source") ) << "usage keys of DKI only with a preference";
}

TEST(ProtocolApiFields, HeartbeatLimits) {
  Heartbeat h{.id = 1, .role = "frontend", .name = "m", .model = "m", .protocol_version = 1, .context_length = 512,
              .page_size = 16, .max_prompt_tokens = 400, .vocab_size = 512, .default_max_tokens = 256};
  Heartbeat out = round_trip(h);
  EXPECT_EQ(out.model, "m");
  EXPECT_EQ(out.protocol_version, 1);
  EXPECT_EQ(out.context_length, 512);
  EXPECT_EQ(out.page_size, 16);
  EXPECT_EQ(out.max_prompt_tokens, 400);
  EXPECT_EQ(out.vocab_size, 512);
  EXPECT_EQ(out.default_max_tokens, 256);
  EXPECT_FALSE(peek_has_key(encode(Heartbeat{.id = 1}), "context_length")) << "absent when 0";
}

TEST(ProtocolApiFields, PeekHasKey) {
  const std::string b = encode(GenerateRequest{.id = 1, .prompt = "x"});
  EXPECT_TRUE(peek_has_key(b, "max_tokens"));  // the encoder writes every request field
  EXPECT_FALSE(peek_has_key(b, "nope"));
  EXPECT_FALSE(peek_has_key("\xc1garbage", "id"));
}

}  // namespace
}  // namespace tessera::protocol

namespace tessera::protocol {
namespace {

// Prompt log-probabilities (echo + logprobs): the request field, the plan's scored chunks, the
// worker's answer and the events, each omitted when off.
TEST(ProtocolApiFields, PromptLogprobsOnEveryLink) {
  GenerateRequest in{.id = 6, .prompt = "x"};
  EXPECT_FALSE(peek_has_key(encode(in), "prompt_logprobs")) << "omitted when off";
  in.sampling.prompt_logprobs = 3;
  EXPECT_EQ(round_trip(in).sampling.prompt_logprobs, 3);
  EXPECT_EQ(required_sampling_capabilities(in.sampling).back(), "prompt_logprobs");
  in.sampling.prompt_logprobs = 21;
  auto bad = decode(encode(in));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kOutOfRange);

  StepPlan plan{.step_id = 3};
  SeqPlan s{.request_id = 7, .tokens = {1, 2}, .start_pos = 0, .block_table = {0}, .slot_mapping = {0, 1}};
  s.sampling.prompt_logprobs = 1;
  s.prompt_logprobs = true;
  s.next_token = 9;
  plan.seqs.push_back(s);
  StepPlanMsg pm = round_trip(StepPlanMsg{.id = 3, .plan = plan});
  ASSERT_EQ(pm.plan.seqs.size(), 1u);
  EXPECT_TRUE(pm.plan.seqs[0].prompt_logprobs);
  EXPECT_EQ(pm.plan.seqs[0].next_token, 9);
  EXPECT_EQ(pm.plan.seqs[0].sampling.prompt_logprobs, 1);

  StepResult r{.step_id = 3};
  r.prompt_logprobs.push_back({.request_id = 7, .first_pos = 1, .logprobs = {-0.5f, -2.0f}, .top = {{{4, -0.25f}}, {{9, -2.0f}}}});
  StepResultMsg rm = round_trip(StepResultMsg{.id = 3, .result = r});
  ASSERT_EQ(rm.result.prompt_logprobs.size(), 1u);
  EXPECT_EQ(rm.result.prompt_logprobs[0].first_pos, 1);
  EXPECT_EQ(rm.result.prompt_logprobs[0].logprobs, r.prompt_logprobs[0].logprobs);
  EXPECT_EQ(rm.result.prompt_logprobs[0].top[1][0].token, 9);
  EXPECT_FALSE(peek_has_key(encode(StepResultMsg{.id = 3, .result = StepResult{.step_id = 3}}), "prompt_logprobs"));

  TokenEvent t{.id = 6};
  t.prompt_logprobs = {-1.0f};
  t.prompt_top_logprobs = {{{3, -1.0f}}};
  TokenEvent tout = round_trip(t);
  EXPECT_EQ(tout.prompt_logprobs, t.prompt_logprobs);
  EXPECT_EQ(tout.prompt_top_logprobs[0][0].token, 3);
  EXPECT_FALSE(peek_has_key(encode(TokenEvent{.id = 1, .tokens = {4}}), "prompt_logprobs"));
  FinalEvent f{.id = 6};
  f.prompt_logprobs = {-1.0f};
  EXPECT_EQ(round_trip(f).prompt_logprobs, f.prompt_logprobs);
}

}  // namespace
}  // namespace tessera::protocol

namespace tessera::protocol {
namespace {

// CacheBlend over several steps: a chunk that cuts a document carries blend_tail (the rest of
// it); omitted when empty.
TEST(ProtocolApiFields, BlendTailRoundTripsAndIsOmittedWhenEmpty) {
  StepPlan plan{.step_id = 4};
  SeqPlan s{.request_id = 8, .tokens = {5, 6}, .start_pos = 2, .block_table = {0}, .slot_mapping = {2, 3}};
  s.blend_chunks = {{1, 5}};
  s.blend_head = {3, 4};
  plan.seqs.push_back(s);
  EXPECT_EQ(encode(StepPlanMsg{.id = 4, .plan = plan}).find("blend_tail"), std::string::npos) << "omitted when empty";
  plan.seqs[0].blend_tail = {7, 8};
  StepPlanMsg pm = round_trip(StepPlanMsg{.id = 4, .plan = plan});
  ASSERT_EQ(pm.plan.seqs.size(), 1u);
  EXPECT_EQ(pm.plan.seqs[0].blend_tail, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(pm.plan.seqs[0].blend_head, (std::vector<int32_t>{3, 4}));
  ASSERT_EQ(pm.plan.seqs[0].blend_chunks.size(), 1u);
  EXPECT_EQ(pm.plan.seqs[0].blend_chunks[0].length, 5);
}

// A compact head (workers with capability blend_steps): blend_head_from round-trips and is
// omitted when 0 (the whole head), so older workers never see it.
TEST(ProtocolApiFields, BlendHeadFromRoundTripsAndIsOmittedWhenZero) {
  StepPlan plan{.step_id = 5};
  SeqPlan s{.request_id = 9, .tokens = {5, 6}, .start_pos = 12, .block_table = {0}, .slot_mapping = {12, 13}};
  s.blend_chunks = {{1, 4}, {5, 9}};
  s.blend_head = {3, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9};
  plan.seqs.push_back(s);
  EXPECT_EQ(encode(StepPlanMsg{.id = 5, .plan = plan}).find("blend_head_from"), std::string::npos) << "omitted when 0";
  plan.seqs[0].blend_head = {3, 9, 9, 9, 9, 9, 9, 9};
  plan.seqs[0].blend_head_from = 5;
  StepPlanMsg pm = round_trip(StepPlanMsg{.id = 5, .plan = plan});
  ASSERT_EQ(pm.plan.seqs.size(), 1u);
  EXPECT_EQ(pm.plan.seqs[0].blend_head_from, 5);
  EXPECT_EQ(pm.plan.seqs[0].blend_head.size(), 8u);
}

}  // namespace
}  // namespace tessera::protocol
