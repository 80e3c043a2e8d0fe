// SentencePiece-style tokenizer.json (Llama 2 / Mistral layout: U+2581 pieces, byte_fallback,
// merges). No such file ships in ../shared, so the tests write one from a llama2.c vocabulary
// the way Hugging Face's converter does (merges = every split of a piece into two pieces,
// ordered by the piece's SentencePiece score) and require the same ids as tokenizer.bin.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "tessera/testing/paths.h"
#include "tessera/tokenizer/tokenizer.h"
#include "test_util.h"

namespace tessera::worker {
namespace {

using nlohmann::json;
using testing::shared_path;

std::string to_metaspace(const std::string& p) {
  std::string out;
  for (char c : p) out += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
  return out;
}

// `style`: "normalizer" (Prepend + Replace, as Llama 2) or "metaspace" (prepend_scheme first).
json convert(const testutil::Llama2cVocab& v, const std::string& style) {
  json vocab = json::object();
  std::vector<std::string> pieces(v.pieces.size());
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    pieces[i] = i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : to_metaspace(v.pieces[i]);
    vocab[pieces[i]] = i;
  }
  struct Merge {
    std::string l, r;
    float score;
  };
  std::vector<Merge> merges;
  for (size_t i = 259; i < pieces.size(); ++i) {  // normal pieces (after <unk>, <s>, </s> and 256 bytes)
    const std::string& p = pieces[i];
    for (size_t k = 1; k < p.size(); ++k) {
      const std::string l = p.substr(0, k), r = p.substr(k);
      if (vocab.contains(l) && vocab.contains(r)) merges.push_back({l, r, v.scores[i]});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  json merge_list = json::array();
  for (const Merge& m : merges) merge_list.push_back(m.l + " " + m.r);
  json added = json::array();
  for (int id = 0; id < 3; ++id) {
    added.push_back({{"id", id}, {"content", pieces[static_cast<size_t>(id)]}, {"special", true}, {"lstrip", false},
                     {"rstrip", false}, {"single_word", false}, {"normalized", false}});
  }
  json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "Sequence"}, {"decoders", json::array({{{"type", "ByteFallback"}}})}}},
      {"model",
       {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true}, {"vocab", vocab},
        {"merges", merge_list}}},
  };
  if (style == "normalizer") {
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}})}};
    j["pre_tokenizer"] = nullptr;
  } else {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", false}};
  }
  return j;
}

class HfSentencePieceTest : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(HfSentencePieceTest, SameIdsAsTokenizerBin) {
  const auto [file, style] = GetParam();
  const auto v = testutil::read_llama2c_vocab(shared_path(file));
  const std::string dir = testing::make_temp_dir("tok-hfspm");
  testutil::write_file(dir + "/tokenizer.json", convert(v, style).dump());
  const auto hf = testutil::must_load(dir);
  const auto bin = testutil::must_load(shared_path(file));
  ASSERT_NE(hf, nullptr);
  ASSERT_NE(bin, nullptr);
  EXPECT_EQ(hf->bos_id(), 1);
  EXPECT_EQ(hf->eos_id(), 2);
  EXPECT_TRUE(hf->strips_first_space());
  // Metaspace (as Hugging Face's tokenizers and transformers.js) adds no dummy prefix to a text
  // that already starts with a space: "  two" is "▁▁two", which tokenizer.bin gives for " two".
  const bool metaspace = std::string(style) == "metaspace";
  auto bin_ids = [&](const std::string& t) { return bin->encode(metaspace && t.starts_with(' ') ? t.substr(1) : t, true); };
  const std::vector<std::string> texts = {"Once upon a time", "Hello world", "  two spaces", "caf\xC3\xA9 \xE4\xB8\xAD",
                                          "emoji \xF0\x9F\x98\x80!", "new\nline", "a", ""};
  for (const std::string& t : texts) {
    EXPECT_EQ(hf->encode(t, true), bin_ids(t)) << t;
    EXPECT_EQ(hf->decode(hf->encode(t, true)), metaspace && t.starts_with(' ') ? t.substr(1) : t);
  }
  const std::vector<std::string> alphabet = {"a", "e", "h", "t", "o", "n", " ", "  ", ".", "\n", "the", "ing", "T",
                                             "1", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80"};
  std::mt19937 rng(7);
  for (int r = 0; r < 200; ++r) {
    std::string t;
    const int n = static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) t += alphabet[rng() % alphabet.size()];
    ASSERT_EQ(hf->encode(t, true), bin_ids(t)) << "'" << t << "'";
  }
  // Special tokens written in the text are matched (Hugging Face's default). The text after
  // them gets the dummy prefix with Prepend, but not with Metaspace prepend_scheme "first".
  const auto ids = hf->encode("<s>Once", false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  if (std::string(style) == "normalizer") {
    EXPECT_EQ(ids, (std::vector<int32_t>{1, v.id(" Once")}));
  } else {
    EXPECT_NE(hf->token_bytes(ids[1])[0], ' ');
    EXPECT_EQ(hf->decode(ids), "Once");
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Vocabularies, HfSentencePieceTest,
    ::testing::Combine(::testing::Values("models/stories260K/tok512.bin", "tokenizers/llama2/tokenizer.bin"),
                       ::testing::Values("normalizer", "metaspace")));

}  // namespace
}  // namespace tessera::worker
