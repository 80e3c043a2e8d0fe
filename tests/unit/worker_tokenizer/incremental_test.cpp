// IncrementalDecoder: never emits broken UTF-8; push()* + flush() == decode().
#include <gtest/gtest.h>

#include <random>

#include "tessera/testing/paths.h"
#include "tessera/tokenizer/tokenizer.h"
#include "test_util.h"

namespace tessera::worker {
namespace {

using testing::shared_path;

std::string stream(const Tokenizer& tok, const std::vector<int32_t>& ids, std::vector<std::string>* parts = nullptr,
                   bool sequence_start = true) {
  IncrementalDecoder d(tok, sequence_start);
  std::string all;
  for (int32_t id : ids) {
    std::string s = d.push(id);
    EXPECT_TRUE(testutil::is_valid_utf8(s)) << "push(" << id << ") emitted invalid UTF-8";
    if (parts != nullptr) parts->push_back(s);
    all += s;
  }
  const std::string tail = d.flush();
  EXPECT_TRUE(testutil::is_valid_utf8(tail));
  if (parts != nullptr) parts->push_back(tail);
  return all + tail;
}

TEST(IncrementalDecoder, EmojiSplitAcrossByteTokensIsHeldUntilComplete) {
  const auto tok = testutil::must_load(shared_path("models/stories260K/tok512.bin"));
  ASSERT_NE(tok, nullptr);
  // BOS, " Once", then U+1F600 as four byte tokens, then " upon".
  const std::vector<int32_t> ids = {1, 403, 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3, 407};
  std::vector<std::string> parts;
  const std::string all = stream(*tok, ids, &parts);
  const std::vector<std::string> expected = {"", "Once", "", "", "", "\xF0\x9F\x98\x80", " upon", ""};
  EXPECT_EQ(parts, expected);
  EXPECT_EQ(all, tok->decode(ids));
  EXPECT_EQ(all, "Once\xF0\x9F\x98\x80 upon");
}

TEST(IncrementalDecoder, FirstPieceSpaceOnlyAtSequenceStart) {
  const auto tok = testutil::must_load(shared_path("models/stories260K/tok512.bin"));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(stream(*tok, {403, 407}), "Once upon");
  EXPECT_EQ(stream(*tok, {403, 407}, nullptr, /*sequence_start=*/false), " Once upon");
}

TEST(IncrementalDecoder, InvalidBytesBecomeReplacementCharacters) {
  const auto tok = testutil::must_load(shared_path("models/stories260K/tok512.bin"));
  ASSERT_NE(tok, nullptr);
  IncrementalDecoder d(*tok);
  EXPECT_EQ(d.push(0xFF + 3), "\xEF\xBF\xBD") << "0xFF can never start a character: replaced at once";
  EXPECT_EQ(d.push(0xE4 + 3), "");
  EXPECT_EQ(d.push(3 + 'a'), "\xEF\xBF\xBD" "a") << "E4 then 'a': the held byte is ill-formed";
  EXPECT_EQ(d.push(0xE4 + 3), "");
  EXPECT_EQ(d.push(0xB8 + 3), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD") << "an incomplete character at the end";
  EXPECT_EQ(d.flush(), "");
}

TEST(IncrementalDecoder, MatchesDecodeOnEncodedText) {
  const char* files[] = {"models/stories260K/tok512.bin", "tokenizers/llama2/tokenizer.bin",
                         "tokenizers/smollm2/tokenizer.json"};
  const std::vector<std::string> texts = {"Once upon a time", "  spaces", "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87",
                                          "emoji \xF0\x9F\x98\x80\xF0\x9F\x9A\x80!", "<|im_start|>user\nHi<|im_end|>"};
  for (const char* f : files) {
    const auto tok = testutil::must_load(shared_path(f));
    ASSERT_NE(tok, nullptr);
    for (const std::string& t : texts) {
      for (bool special : {false, true}) {
        const auto ids = tok->encode(t, special);
        EXPECT_EQ(stream(*tok, ids), t) << f << ": " << t;
        EXPECT_EQ(tok->decode(ids), t) << f << ": " << t;
      }
    }
  }
}

TEST(IncrementalDecoder, RandomIdSequencesNeverEmitInvalidUtf8) {
  const char* files[] = {"models/stories260K/tok512.bin", "tokenizers/llama2/tokenizer.bin",
                         "tokenizers/smollm2/tokenizer.json"};
  std::mt19937 rng(42);
  for (const char* f : files) {
    const auto tok = testutil::must_load(shared_path(f));
    ASSERT_NE(tok, nullptr);
    // Byte-fallback ids (3..258 for SentencePiece) are drawn often so characters get split,
    // plus ids out of range, which decode to nothing.
    for (int round = 0; round < 300; ++round) {
      std::vector<int32_t> ids;
      const int n = 1 + static_cast<int>(rng() % 40);
      for (int i = 0; i < n; ++i) {
        const uint32_t kind = rng() % 10;
        if (kind < 5) {
          ids.push_back(static_cast<int32_t>(3 + rng() % 256));
        } else if (kind < 9) {
          ids.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(tok->vocab_size())));
        } else {
          ids.push_back(kind % 2 == 0 ? -5 : tok->vocab_size() + 7);
        }
      }
      const std::string all = stream(*tok, ids);
      ASSERT_TRUE(testutil::is_valid_utf8(all));
      ASSERT_EQ(all, tok->decode(ids)) << f << " round " << round;
    }
  }
}

}  // namespace
}  // namespace tessera::worker
