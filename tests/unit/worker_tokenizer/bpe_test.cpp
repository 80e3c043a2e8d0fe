// Byte-level BPE: Hugging Face tokenizer.json (smollm2 reference encodings), the same
// vocabulary as a GGUF "gpt2" VocabSpec, small hand-made tokenizer.json files, and errors.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <nlohmann/json.hpp>

#include "tessera/testing/paths.h"
#include "tessera/tokenizer/tokenizer.h"
#include "test_util.h"

namespace tessera::worker {
namespace {

using nlohmann::json;
using testing::shared_path;

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> smollm2_cases() {
  const json j = json::parse(testutil::read_file(shared_path("tokenizers/smollm2/encode_cases.json")));
  std::vector<Case> cases;
  for (const json& c : j) cases.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>()});
  return cases;
}

TEST(Smollm2, EncodeCasesExactAndDecodeBack) {
  const auto tok = testutil::must_load(shared_path("tokenizers/smollm2/tokenizer.json"));
  ASSERT_NE(tok, nullptr);
  const auto cases = smollm2_cases();
  ASSERT_EQ(cases.size(), 10u);
  for (const Case& c : cases) {
    EXPECT_EQ(tok->encode(c.text, false), c.ids) << "text: " << c.text;
    EXPECT_EQ(tok->decode(c.ids), c.text);
  }
}

TEST(Smollm2, DirectorySpecialTokensAndIds) {
  const auto tok = testutil::must_load(shared_path("tokenizers/smollm2"));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->token_id("<|im_start|>"), 1);
  EXPECT_EQ(tok->token_id("<|im_end|>"), 2);
  EXPECT_TRUE(tok->is_control(1));
  EXPECT_FALSE(tok->is_control(504));
  EXPECT_EQ(tok->bos_id(), 1);  // config.json bos_token_id
  EXPECT_EQ(tok->eos_id(), 2);  // config.json eos_token_id
  EXPECT_FALSE(tok->strips_first_space());
  EXPECT_EQ(tok->token_bytes(1), "<|im_start|>");
  EXPECT_EQ(tok->token_id("\xC4\xA0the"), 260);  // "Ġthe" as spelled in the vocabulary
  EXPECT_EQ(tok->token_bytes(260), " the");
  // No post-processor: add_special adds nothing.
  EXPECT_EQ(tok->encode("Hello, world!", true), tok->encode("Hello, world!", false));
}

TEST(Smollm2, InvalidUtf8AndLongInput) {
  const auto tok = testutil::must_load(shared_path("tokenizers/smollm2/tokenizer.json"));
  ASSERT_NE(tok, nullptr);
  // A lone continuation byte is not UTF-8 but has a byte token: it survives encoding.
  const auto ids = tok->encode("a\x80" "b", false);
  std::string bytes;
  for (int32_t id : ids) bytes += tok->token_bytes(id);
  EXPECT_EQ(bytes, "a\x80" "b") << "raw bytes survive byte-level encoding";
  EXPECT_EQ(tok->decode(ids), "a\xEF\xBF\xBD" "b");
  // 0xFF never occurs in UTF-8 and smollm2 has no token for it (nor an unk token): like
  // Hugging Face's BPE without unk_token, it is dropped.
  ASSERT_EQ(tok->token_id("\xC3\xBF"), -1);
  EXPECT_EQ(tok->encode("a\xFF" "b", false), (std::vector<int32_t>{tok->token_id("a"), tok->token_id("b")}));

  std::string t;
  while (t.size() < 200000) t += "The quick brown fox 12345 jumps \xE4\xB8\xAD\xE6\x96\x87 <|im_end|> over\n";
  EXPECT_EQ(tok->decode(tok->encode(t, false)), t);
  const std::string same(100000, 'a');  // one pre-token of 100k bytes
  EXPECT_EQ(tok->decode(tok->encode(same, false)), same);
}

TEST(Smollm2, GgufGpt2VocabGivesSameIds) {
  const json j = json::parse(testutil::read_file(shared_path("tokenizers/smollm2/tokenizer.json")));
  VocabSpec spec;
  spec.model = "gpt2";
  spec.pre = "smollm";
  const auto& vocab = j.at("model").at("vocab");
  spec.tokens.resize(vocab.size());
  for (const auto& [tok, id] : vocab.items()) spec.tokens[id.get<size_t>()] = tok;
  spec.token_types.assign(spec.tokens.size(), 1);
  for (const json& a : j.at("added_tokens")) spec.token_types[a.at("id").get<size_t>()] = 3;
  for (const json& m : j.at("model").at("merges")) {
    spec.merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.add_bos = false;
  auto tok = tokenizer_from_vocab(spec);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  for (const Case& c : smollm2_cases()) {
    EXPECT_EQ((*tok)->encode(c.text, false), c.ids) << "text: " << c.text;
    EXPECT_EQ((*tok)->decode(c.ids), c.text);
  }
  spec.pre = "no-such-pre";
  auto bad = tokenizer_from_vocab(spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("no-such-pre"), std::string::npos);
}

// A tiny byte-level tokenizer.json: the 256 byte tokens plus merges for "ab", "abc", " ab".
json tiny_tokenizer() {
  json vocab = json::object();
  auto spell = [](unsigned char b) {
    // GPT-2 bytes_to_unicode, written out independently of the implementation.
    int n = 0;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
      if (c == b) {
        const uint32_t cp = printable ? static_cast<uint32_t>(c) : 0x100u + static_cast<uint32_t>(n);
        std::string s;
        if (cp < 0x80) {
          s.push_back(static_cast<char>(cp));
        } else {
          s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
          s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        }
        return s;
      }
      if (!printable) ++n;
    }
    return std::string();
  };
  for (int b = 0; b < 256; ++b) vocab[spell(static_cast<unsigned char>(b))] = b;
  const std::string sp = spell(' ');
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab[sp + "ab"] = 258;
  vocab["<tag>"] = 259;
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", 259}, {"content", "<tag>"}, {"special", true}, {"lstrip", true},
                                     {"rstrip", false}, {"single_word", false}, {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b", "ab c", sp + " ab"})}}},
  };
}

std::string write_json(const std::string& dir, const std::string& name, const json& j) {
  const std::string p = dir + "/" + name;
  testutil::write_file(p, j.dump());
  return p;
}

TEST(TinyBpe, MergesStringAndArrayFormsAgree) {
  const std::string dir = testing::make_temp_dir("tok-tiny");
  json j = tiny_tokenizer();
  auto a = testutil::must_load(write_json(dir, "a.json", j));
  json arr = json::array();
  for (const json& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    arr.push_back(json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)}));
  }
  j["model"]["merges"] = arr;
  auto b = testutil::must_load(write_json(dir, "b.json", j));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  // "abc ab x": pre-tokens "abc", " ab", " x" -> 257, 258, ' ' 'x'.
  const std::vector<int32_t> expected = {257, 258, ' ', 'x'};
  EXPECT_EQ(a->encode("abc ab x", false), expected);
  EXPECT_EQ(b->encode("abc ab x", false), expected);
  // lstrip: the spaces before <tag> belong to the token.
  EXPECT_EQ(a->encode("ab  <tag>ab", false), (std::vector<int32_t>{256, 259, 256}));
  std::filesystem::remove_all(dir);
}

TEST(TinyBpe, ByteLevelAddPrefixSpace) {
  const std::string dir = testing::make_temp_dir("tok-prefix");
  json j = tiny_tokenizer();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  auto tok = testutil::must_load(write_json(dir, "tokenizer.json", j));
  ASSERT_NE(tok, nullptr);
  // "ab" becomes " ab" (258); a text already starting with a space gets none added.
  EXPECT_EQ(tok->encode("ab", false), (std::vector<int32_t>{258}));
  EXPECT_EQ(tok->encode(" ab", false), (std::vector<int32_t>{258}));
  std::filesystem::remove_all(dir);
}

TEST(Smollm2, ConcurrentEncodeGivesSameIds) {
  const auto tok = testutil::must_load(shared_path("tokenizers/smollm2/tokenizer.json"));
  ASSERT_NE(tok, nullptr);
  const auto cases = smollm2_cases();
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        for (const Case& c : cases) {
          if (tok->encode(c.text, false) != c.ids) mismatches.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Normalizers run on the text between added tokens, before pre-tokenization (Qwen's NFC; the
// real files are checked against an independent encoder in tokenizer_conformance_test).
TEST(TinyBpe, NormalizersApplyBeforePreTokenization) {
  const std::string dir = testing::make_temp_dir("tok-norm");
  auto load_with = [&](const std::string& name, const json& normalizer) {
    json j = tiny_tokenizer();
    j["normalizer"] = normalizer;
    const std::string p = dir + "/" + name;
    testutil::write_file(p, j.dump());
    auto r = load_tokenizer(p);
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    return std::move(r).value();
  };
  auto plain = load_with("plain.json", nullptr);
  auto nfc = load_with("nfc.json", {{"type", "NFC"}});
  auto nfd = load_with("nfd.json", {{"type", "NFD"}});
  const std::string composed = "caf\xC3\xA9";      // café, é = U+00E9
  const std::string decomposed = "cafe\xCC\x81";   // e + U+0301
  EXPECT_NE(plain->encode(decomposed, false), plain->encode(composed, false));
  EXPECT_EQ(nfc->encode(decomposed, false), plain->encode(composed, false));
  EXPECT_EQ(nfd->encode(composed, false), plain->encode(decomposed, false));
  EXPECT_EQ(nfc->decode(nfc->encode(decomposed, false)), composed);
  auto kc = load_with("nfkc.json", {{"type", "NFKC"}});
  EXPECT_EQ(kc->encode("\xEF\xAC\x81", false), plain->encode("fi", false));  // U+FB01 ligature -> "fi"
  auto seq = load_with("seq.json", {{"type", "Sequence"},
                                    {"normalizers", {{{"type", "Lowercase"}}, {{"type", "Replace"}, {"pattern", {{"String", "x"}}}, {"content", "y"}}}}});
  EXPECT_EQ(seq->encode("XoX", false), plain->encode("yoy", false));
  // Not UTF-8: passed through unchanged.
  EXPECT_EQ(nfc->encode("a\xFF" "b", false), plain->encode("a\xFF" "b", false));
}

TEST(TinyBpe, ErrorsNameTheProblem) {
  const std::string dir = testing::make_temp_dir("tok-bad");
  auto expect_error = [&](const std::string& name, const std::string& content, ErrorCode code, const std::string& needle) {
    const std::string p = dir + "/" + name;
    testutil::write_file(p, content);
    auto r = load_tokenizer(p);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.error().code, code) << r.error().to_string();
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(p), std::string::npos) << r.error().message;
  };
  expect_error("bad.json", "{\"model\": [1, 2", ErrorCode::kMalformedMessage, "bad JSON");
  json j = tiny_tokenizer();
  j["model"]["type"] = "WordPiece";
  expect_error("wordpiece.json", j.dump(), ErrorCode::kUnsupported, "WordPiece");
  j = tiny_tokenizer();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_error("bert.json", j.dump(), ErrorCode::kUnsupported, "normalizer 'BertNormalizer' is not supported");
  j = tiny_tokenizer();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}};
  expect_error("regex.json", j.dump(), ErrorCode::kUnsupported, "Replace with a Regex pattern");
  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  expect_error("metaspace.json", j.dump(), ErrorCode::kUnsupported, "Metaspace");
  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  expect_error("bert.json", j.dump(), ErrorCode::kUnsupported, "BertPreTokenizer");
  j = tiny_tokenizer();
  j["model"]["byte_fallback"] = true;
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array()}};
  j["pre_tokenizer"] = nullptr;
  expect_error("spm_style.json", j.dump(), ErrorCode::kUnsupported, "does not map ' ' to U+2581");
  j = tiny_tokenizer();
  j["model"]["merges"].push_back("zz q");
  expect_error("merge.json", j.dump(), ErrorCode::kCorruptFile, "zz q");
  j = tiny_tokenizer();
  j["model"]["vocab"] = 5;
  expect_error("vocab.json", j.dump(), ErrorCode::kCorruptFile, "tokenizer.json");
  const std::string full = testutil::read_file(shared_path("tokenizers/smollm2/tokenizer.json"));
  expect_error("truncated.json", full.substr(0, full.size() / 2), ErrorCode::kMalformedMessage, "bad JSON");
  std::filesystem::remove_all(dir);
}

TEST(TinyBpe, TemplatePostProcessorAddsSpecials) {
  const std::string dir = testing::make_temp_dir("tok-tpl");
  json j = tiny_tokenizer();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<tag>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"special_tokens", {{"<tag>", {{"id", "<tag>"}, {"ids", {259}}, {"tokens", {"<tag>"}}}}}}};
  auto tok = testutil::must_load(write_json(dir, "tokenizer.json", j));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("ab", true), (std::vector<int32_t>{259, 256}));
  EXPECT_EQ(tok->encode("ab", false), (std::vector<int32_t>{256}));
  EXPECT_EQ(tok->bos_id(), 259);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::worker
