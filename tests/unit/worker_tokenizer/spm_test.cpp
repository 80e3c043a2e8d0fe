// SentencePiece BPE: llama2.c tokenizer.bin files (tok512, llama2 32k) and the same
// vocabulary presented as a GGUF "llama" VocabSpec.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "tessera/testing/paths.h"
#include "tessera/model/model.h"
#include "tessera/tokenizer/tokenizer.h"
#include "test_util.h"

namespace tessera::worker {
namespace {

using testing::shared_path;
using testutil::Llama2cVocab;

const std::vector<std::string>& sample_texts() {
  static const std::vector<std::string> texts = {
      "Once upon a time",
      "Lily and Tom",
      "The cat sat on the mat.",
      "Hello world",
      "  two leading spaces",
      "trailing space ",
      "new\nlines\n\nand\ttabs",
      "One day, a little boy named Tim went to the park. He saw a big red ball!",
      "numbers 12345 and 3.14159",
      "caf\xC3\xA9 na\xC3\xAFve",
      "\xE4\xB8\xAD\xE6\x96\x87 CJK",
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x9A\x80 rocket",
      "a",
      " ",
      "\"quotes\" and 'apostrophes' don't",
  };
  return texts;
}

class SpmFileTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    path_ = shared_path(GetParam());
    tok_ = testutil::must_load(path_);
    ASSERT_NE(tok_, nullptr);
    vocab_ = testutil::read_llama2c_vocab(path_);
  }
  std::string path_;
  std::unique_ptr<Tokenizer> tok_;
  Llama2cVocab vocab_;
};

TEST_P(SpmFileTest, VocabularyAndSpecialIds) {
  EXPECT_EQ(tok_->vocab_size(), static_cast<int32_t>(vocab_.pieces.size()));
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_TRUE(tok_->is_control(1));
  EXPECT_TRUE(tok_->is_control(2));
  EXPECT_FALSE(tok_->is_control(3));
  EXPECT_EQ(tok_->token_bytes(1), "");
  EXPECT_EQ(tok_->token_bytes(2), "");
  EXPECT_EQ(tok_->token_id("<0x41>"), 3 + 0x41);
  EXPECT_EQ(tok_->token_bytes(3 + 0x41), "A");
  EXPECT_TRUE(tok_->strips_first_space());
}

TEST_P(SpmFileTest, BosOnlyWithSpecial) {
  const auto with = tok_->encode("Once upon a time", true);
  const auto without = tok_->encode("Once upon a time", false);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with[0], 1);
  EXPECT_EQ(std::vector<int32_t>(with.begin() + 1, with.end()), without);
  EXPECT_EQ(tok_->encode("", true), std::vector<int32_t>{1});
  EXPECT_TRUE(tok_->encode("", false).empty());
}

TEST_P(SpmFileTest, MatchesLlama2cReferenceOnSamples) {
  for (const std::string& t : sample_texts()) {
    EXPECT_EQ(tok_->encode(t, true), testutil::reference_encode(vocab_, t, true)) << "text: " << t;
  }
}

TEST_P(SpmFileTest, MatchesLlama2cReferenceOnRandomText) {
  const std::vector<std::string> alphabet = {"a", "b", "e", "h", "t", "o", "n", "s", " ", " ", "  ", ".", ",", "!",
                                             "\n", "the", "ing", "T", "L", "1", "9", "\xC3\xA9", "\xE4\xB8\xAD",
                                             "\xF0\x9F\x98\x80", "'", "-"};
  std::mt19937 rng(1234);
  const int rounds = vocab_.pieces.size() > 1000 ? 60 : 300;
  for (int r = 0; r < rounds; ++r) {
    std::string t;
    const int n = static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) t += alphabet[rng() % alphabet.size()];
    ASSERT_EQ(tok_->encode(t, true), testutil::reference_encode(vocab_, t, true)) << "text: '" << t << "'";
  }
}

// Real prose: every prompt + completion of greedy.json, against the reference algorithm.
TEST_P(SpmFileTest, MatchesLlama2cReferenceOnStories) {
  const auto j = nlohmann::json::parse(testutil::read_file(shared_path("models/stories260K/greedy.json")));
  size_t checked = 0;
  for (const auto& c : j.at("cases")) {
    const std::string t = c.at("prompt").get<std::string>() + c.at("completion").get<std::string>();
    if (vocab_.pieces.size() > 1000 && t.size() > 300) continue;  // the O(n^2) reference is slow on 32k pieces
    ASSERT_EQ(tok_->encode(t, true), testutil::reference_encode(vocab_, t, true)) << t;
    EXPECT_EQ(tok_->decode(tok_->encode(t, true)), t);
    ++checked;
  }
  EXPECT_GE(checked, 4u);
}

TEST_P(SpmFileTest, DummyPrefixSpaceAndRoundTrip) {
  const auto ids = tok_->encode("Hello", false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(tok_->token_bytes(ids[0])[0], ' ') << "the first piece carries the dummy-prefix space";
  for (const std::string& t : sample_texts()) {
    EXPECT_EQ(tok_->decode(tok_->encode(t, true)), t);
    EXPECT_EQ(tok_->decode(tok_->encode(t, false)), t);
  }
}

TEST_P(SpmFileTest, ByteFallbackForEmoji) {
  // U+1F600 is F0 9F 98 80; neither vocabulary has it as a piece: 4 byte tokens (byte + 3).
  ASSERT_EQ(vocab_.id("\xF0\x9F\x98\x80"), -1);
  const auto ids = tok_->encode("\xF0\x9F\x98\x80", false);
  const std::vector<int32_t> expected = {vocab_.id(" "), 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3};
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tok_->decode(ids), "\xF0\x9F\x98\x80");
}

TEST_P(SpmFileTest, UnknownBytesSurviveAsByteTokens) {
  // 0xFF is never valid UTF-8: it falls back to <0xFF> and decodes to U+FFFD.
  const auto ids = tok_->encode("a\xFF", false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), 0xFF + 3);
  EXPECT_EQ(tok_->token_bytes(0xFF + 3), "\xFF");
  EXPECT_EQ(tok_->decode(ids), "a\xEF\xBF\xBD");
  // A truncated sequence: E4 B8 without its last byte.
  const auto ids2 = tok_->encode("\xE4\xB8", false);
  EXPECT_EQ(std::vector<int32_t>(ids2.end() - 2, ids2.end()), (std::vector<int32_t>{0xE4 + 3, 0xB8 + 3}));
}

TEST_P(SpmFileTest, LongInputIsFast) {
  // 200k characters: an O(n^2) merge loop would not finish within the test timeout.
  std::string t;
  while (t.size() < 200000) t += "Once upon a time, there was a little girl named Lily. \xE4\xB8\xAD ";
  const auto ids = tok_->encode(t, true);
  EXPECT_GT(ids.size(), 1000u);
  EXPECT_EQ(tok_->decode(ids), t);
  const std::string same(100000, 'a');
  EXPECT_EQ(tok_->decode(tok_->encode(same, false)), same);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, SpmFileTest,
                         ::testing::Values("models/stories260K/tok512.bin", "tokenizers/llama2/tokenizer.bin"));

TEST(Tok512, OnceUponATimeIsBosThenWholeWordPieces) {
  const auto tok = testutil::must_load(shared_path("models/stories260K/tok512.bin"));
  ASSERT_NE(tok, nullptr);
  const auto v = testutil::read_llama2c_vocab(shared_path("models/stories260K/tok512.bin"));
  // The pieces as stored in the file: " Once" etc. are whole pieces.
  const std::vector<int32_t> expected = {1, v.id(" Once"), v.id(" upon"), v.id(" a"), v.id(" time")};
  EXPECT_EQ(expected, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok->encode("Once upon a time", true), expected);
}

TEST(Tok512, CjkFallsBackToBytes) {
  const auto tok = testutil::must_load(shared_path("models/stories260K/tok512.bin"));
  ASSERT_NE(tok, nullptr);
  // 中 = E4 B8 AD is not among the 512 pieces.
  EXPECT_EQ(tok->encode("\xE4\xB8\xAD", false), (std::vector<int32_t>{410, 0xE4 + 3, 0xB8 + 3, 0xAD + 3}));
  EXPECT_EQ(tok->token_bytes(410), " ");
}

TEST(Llama2, KnownIds) {
  const auto tok = testutil::must_load(shared_path("tokenizers/llama2/tokenizer.bin"));
  ASSERT_NE(tok, nullptr);
  // Well-known Llama 2 SentencePiece ids (also checked against the file's pieces).
  EXPECT_EQ(tok->encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(tok->token_bytes(15043), " Hello");
  EXPECT_EQ(tok->encode("Once upon a time", true), (std::vector<int32_t>{1, 9038, 2501, 263, 931}));
  // 中 is a piece of the 32k vocabulary (id 30275): no byte fallback there.
  EXPECT_EQ(tok->encode("\xE4\xB8\xAD", false), (std::vector<int32_t>{29871, 30275}));
  EXPECT_EQ(tok->encode("\xF0\x9F\x98\x80", false), (std::vector<int32_t>{29871, 243, 162, 155, 131}));
}

// The tok512 vocabulary re-spelled as GGUF stores it (U+2581 for space, token types): the
// same implementation must give the same ids, and "<s>" in the text is the BOS token.
TEST(GgufLlamaVocab, SameIdsAsTokenizerBin) {
  const auto v = testutil::read_llama2c_vocab(shared_path("models/stories260K/tok512.bin"));
  VocabSpec spec;
  spec.model = "llama";
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    std::string p;
    for (char c : v.pieces[i]) p += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
    spec.tokens.push_back(i == 1 ? "<s>" : i == 2 ? "</s>" : p);
    spec.scores.push_back(v.scores[i]);
    spec.token_types.push_back(i == 0 ? 2 : i <= 2 ? 3 : i < 259 ? 6 : 1);
  }
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.unk_id = 0;
  auto gguf = tokenizer_from_vocab(spec);
  ASSERT_TRUE(gguf.ok()) << gguf.error().to_string();
  const auto bin = testutil::must_load(shared_path("models/stories260K/tok512.bin"));
  ASSERT_NE(bin, nullptr);
  for (const std::string& t : sample_texts()) {
    EXPECT_EQ((*gguf)->encode(t, true), bin->encode(t, true)) << t;
    EXPECT_EQ((*gguf)->decode((*gguf)->encode(t, true)), t);
  }
  EXPECT_EQ((*gguf)->token_id("\xE2\x96\x81Once"), 403);
  EXPECT_EQ((*gguf)->token_bytes(403), " Once");
  // Control tokens written literally are matched as single tokens.
  const auto ids = (*gguf)->encode("<s>Once", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 403}));
  // User-defined pieces (type 4) are matched literally and decode with U+2581 as ' '.
  spec.tokens.push_back("<tool\xE2\x96\x81" "call>");
  spec.scores.push_back(0.0f);
  spec.token_types.push_back(4);
  auto user = tokenizer_from_vocab(spec);
  ASSERT_TRUE(user.ok()) << user.error().to_string();
  EXPECT_EQ((*user)->encode("Once<tool\xE2\x96\x81" "call>", false), (std::vector<int32_t>{403, 512}));
  EXPECT_EQ((*user)->token_bytes(512), "<tool call>");
  EXPECT_FALSE((*user)->is_control(512));

  spec.add_bos = false;
  auto no_bos = tokenizer_from_vocab(spec);
  ASSERT_TRUE(no_bos.ok());
  EXPECT_EQ((*no_bos)->encode("Once", true), (std::vector<int32_t>{403}));
  // <unk> (type 2) written literally is matched too, as llama.cpp does.
  EXPECT_EQ((*no_bos)->encode("<unk>Once", false), (std::vector<int32_t>{0, 403}));
}

// Phi-3 in GGUF: llama.cpp gives every control/user-defined token but <unk>, <s> and
// <|endoftext|> rstrip when general.name says Phi-3; it swallows ASCII whitespace only.
TEST(GgufLlamaVocab, Phi3ChatTokensSwallowTheWhitespaceAfterThem) {
  const auto v = testutil::read_llama2c_vocab(shared_path("models/stories260K/tok512.bin"));
  VocabSpec spec;
  spec.model = "llama";
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    std::string p;
    for (char c : v.pieces[i]) p += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
    spec.tokens.push_back(i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : p);
    spec.scores.push_back(v.scores[i]);
    spec.token_types.push_back(i == 0 ? 2 : i <= 2 ? 3 : i < 259 ? 6 : 1);
  }
  for (const char* t : {"<|endoftext|>", "<|user|>"}) {
    spec.tokens.push_back(t);
    spec.scores.push_back(-1000.0f);
    spec.token_types.push_back(3);
  }
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.unk_id = 0;
  const int32_t eot = 512, user = 513, once = 403;
  spec.name = "Phi-3-mini-4k-instruct";
  auto phi3 = tokenizer_from_vocab(spec);
  ASSERT_TRUE(phi3.ok()) << phi3.error().to_string();
  EXPECT_EQ((*phi3)->encode("<|user|>\n \tOnce", false), (std::vector<int32_t>{user, once}));
  EXPECT_EQ((*phi3)->encode("</s>  Once", false), (std::vector<int32_t>{2, once}));
  const std::vector<int32_t> kept = (*phi3)->encode("<|endoftext|>\nOnce", false);
  ASSERT_GE(kept.size(), 3u);
  EXPECT_EQ(kept.front(), eot);
  EXPECT_EQ((*phi3)->decode(std::vector<int32_t>(kept.begin() + 1, kept.end())), "\nOnce");
  const std::vector<int32_t> nbsp = (*phi3)->encode("<|user|>\xC2\xA0Once", false);  // U+00A0 is not isspace()
  ASSERT_GE(nbsp.size(), 3u);
  EXPECT_EQ((*phi3)->decode(std::vector<int32_t>(nbsp.begin() + 1, nbsp.end())), "\xC2\xA0Once");
  spec.name = "Llama-2-7b";
  auto llama = tokenizer_from_vocab(spec);
  ASSERT_TRUE(llama.ok());
  const std::vector<int32_t> plain = (*llama)->encode("<|user|>\nOnce", false);
  EXPECT_EQ(plain.front(), user);
  EXPECT_NE(plain, (std::vector<int32_t>{user, once}));
}

// The real GGUF file (llama.cpp's converter wrote its tokenizer.ggml.* vocabulary), read from
// its metadata alone (read_model_vocab) and built into a tokenizer.
TEST(GgufLlamaVocab, Stories260KGgufMatchesTok512) {
  const std::string path = shared_path("models/stories260K/stories260K.gguf");
  auto vocab = read_model_vocab(path);
  ASSERT_TRUE(vocab.ok()) << vocab.error().to_string();
  EXPECT_EQ(vocab->tokens.size(), 512u);
  auto model = load_model(path);  // the same vocabulary as a full load
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  EXPECT_EQ(vocab->tokens, (*model)->vocab.tokens);
  EXPECT_EQ(vocab->scores, (*model)->vocab.scores);
  EXPECT_EQ(vocab->token_types, (*model)->vocab.token_types);
  auto gguf = tokenizer_from_vocab(*vocab);
  ASSERT_TRUE(gguf.ok()) << gguf.error().to_string();
  const auto bin = testutil::must_load(shared_path("models/stories260K/tok512.bin"));
  ASSERT_NE(bin, nullptr);
  EXPECT_EQ((*gguf)->vocab_size(), 512);
  EXPECT_EQ((*gguf)->bos_id(), 1);
  EXPECT_EQ((*gguf)->eos_id(), 2);
  for (const std::string& t : sample_texts()) {
    const auto ids = (*gguf)->encode(t, true);
    EXPECT_EQ(ids, bin->encode(t, true)) << t;
    EXPECT_EQ((*gguf)->decode(ids), t);
  }
}

// The tokenizer library reads no model files; it says where a GGUF vocabulary comes from.
TEST(GgufLlamaVocab, LoadTokenizerRefusesAGgufModelFileNamingTheWay) {
  auto r = load_tokenizer(shared_path("models/stories260K/stories260K.gguf"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("read_model_vocab"), std::string::npos) << r.error().message;
}

// A llama2.c checkpoint and a missing file: no vocabulary / the loader's error.
TEST(GgufLlamaVocab, ReadModelVocabOfOtherFormats) {
  auto bin = read_model_vocab(shared_path("models/stories260K/stories260K.bin"));
  ASSERT_TRUE(bin.ok()) << bin.error().to_string();
  EXPECT_TRUE(bin->tokens.empty());
  auto missing = read_model_vocab(shared_path("models/stories260K/nope.gguf"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kIoError);
}

TEST(SpmErrors, MissingTruncatedAndCorruptFiles) {
  const std::string dir = testing::make_temp_dir("tok-errors");
  auto missing = load_tokenizer(dir + "/nope.bin");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kIoError);
  EXPECT_NE(missing.error().message.find("nope.bin"), std::string::npos);

  const std::string full = testutil::read_file(shared_path("models/stories260K/tok512.bin"));
  for (size_t cut : {size_t{2}, size_t{9}, size_t{14}, full.size() - 1}) {
    const std::string p = dir + "/cut" + std::to_string(cut) + ".bin";
    testutil::write_file(p, full.substr(0, cut));
    auto r = load_tokenizer(p);
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    EXPECT_EQ(r.error().code, ErrorCode::kTruncatedFile) << r.error().to_string();
    EXPECT_NE(r.error().message.find(p), std::string::npos) << r.error().message;
  }
  std::string corrupt = full;
  const int32_t bad_len = 1 << 30;
  std::memcpy(corrupt.data() + 4 + 4, &bad_len, 4);  // token 0's length
  testutil::write_file(dir + "/corrupt.bin", corrupt);
  auto r = load_tokenizer(dir + "/corrupt.bin");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kCorruptFile);
  EXPECT_NE(r.error().message.find("token 0"), std::string::npos) << r.error().message;

  auto empty_dir = load_tokenizer(dir);
  ASSERT_FALSE(empty_dir.ok());
  EXPECT_EQ(empty_dir.error().code, ErrorCode::kNotFound);

  VocabSpec unknown;
  unknown.model = "WordPiece";
  unknown.tokens = {"a"};
  auto u = tokenizer_from_vocab(unknown);
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.error().message.find("WordPiece"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::worker
