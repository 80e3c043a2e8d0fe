// Generation against the real stories260K tokenizer: streamed text equals the tokenizer's
// decode of the same ids, and stop strings cut it exactly.
#include <gtest/gtest.h>

#include "tessera/frontend/generation.h"
#include "tessera/testing/paths.h"

namespace tessera::frontend {
namespace {

std::unique_ptr<Tokenizer> tok512() {
  auto t = load_tokenizer(testing::shared_path("models/stories260K/tok512.bin"));
  EXPECT_TRUE(t.ok()) << t.error().to_string();
  return t.ok() ? std::move(*t) : nullptr;
}

// The ids a model would generate after "Once upon a time" to continue with `text`.
std::vector<int32_t> continuation(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> p = tok.encode("Once upon a time", true), all = tok.encode("Once upon a time" + text, true);
  EXPECT_LT(p.size(), all.size());
  EXPECT_TRUE(std::equal(p.begin(), p.end(), all.begin()));
  return std::vector<int32_t>(all.begin() + static_cast<long>(p.size()), all.end());
}

TEST(Generation, StreamedTextEqualsDecodeOfContinuation) {
  auto tok = tok512();
  ASSERT_TRUE(tok);
  std::vector<int32_t> gen_ids = continuation(*tok, ", there was a little girl named Lily.");
  Generation g(*tok, {}, false);
  std::string streamed;
  for (int32_t id : gen_ids) streamed += g.on_tokens(protocol::TokenEvent{.id = 1, .tokens = {id}}).text;
  streamed += g.finish();
  EXPECT_EQ(streamed, ", there was a little girl named Lily.");
  EXPECT_EQ(g.text(), streamed);
  EXPECT_EQ(g.completion_tokens(), static_cast<int32_t>(gen_ids.size()));
}

TEST(Generation, StopStringCutsAndFlagsStop) {
  auto tok = tok512();
  ASSERT_TRUE(tok);
  std::vector<int32_t> ids = continuation(*tok, ", there was a little girl named Lily.");
  Generation g(*tok, {"girl"}, true);
  std::string streamed;
  for (int32_t id : ids) {
    auto d = g.on_tokens(protocol::TokenEvent{.id = 1, .tokens = {id}, .logprobs = {-1.0f}});
    streamed += d.text;
    EXPECT_EQ(d.text.find("gi"), std::string::npos) << "partial stop string leaked";
  }
  streamed += g.finish();
  EXPECT_TRUE(g.stop_hit());
  EXPECT_EQ(streamed, ", there was a little ");
  EXPECT_FALSE(g.logprobs().empty());
  EXPECT_EQ(g.logprobs()[0].logprob, -1.0f);
}

// The retrieve_fact filter runs between detokenization and stop strings (generation.h): a call
// never reaches the client whatever the token boundaries, it is counted, and a stop string
// inside the call's arguments does not stop the generation.
TEST(Generation, RetrieveFactCallsAreStrippedBeforeStopStrings) {
  auto tok = tok512();
  ASSERT_TRUE(tok);
  const std::string said = " Tom ran. retrieve_fact(\"girl\") He sat.";
  std::vector<int32_t> ids = continuation(*tok, said);
  std::string round_trip;
  {
    Generation plain(*tok, {}, false);
    for (int32_t id : ids) plain.on_tokens(protocol::TokenEvent{.id = 1, .tokens = {id}});
    plain.finish();
    // The tokenizer must reproduce the text for this test to mean anything.
    ASSERT_EQ(plain.text(), " Tom ran.  He sat.");
    EXPECT_EQ(plain.stripped_calls().generic, 1u);
  }
  Generation g(*tok, {"girl", "sat"}, false);
  std::string streamed;
  for (int32_t id : ids) {
    auto d = g.on_tokens(protocol::TokenEvent{.id = 1, .tokens = {id}});
    EXPECT_EQ(d.text.find("retr"), std::string::npos) << "part of a call leaked: " << d.text;
    streamed += d.text;
  }
  streamed += g.finish();
  EXPECT_TRUE(g.stop_hit());
  EXPECT_EQ(g.stop_hit() ? streamed : "", " Tom ran.  He ");
  EXPECT_EQ(g.stripped_calls().total(), 1u);
}

}  // namespace
}  // namespace tessera::frontend
