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
