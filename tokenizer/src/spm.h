// SentencePiece-style BPE with scores and byte fallback (private to worker).
//
// One implementation serves llama2.c tokenizer.bin files (pieces spell space as ' ', bytes
// as "<0xXX>", ids 0/1/2 = unk/BOS/EOS), GGUF "llama" vocabularies (pieces spell space as
// U+2581, token types mark control/byte/user-defined tokens) and SentencePiece-style
// Hugging Face tokenizer.json files (hf_json.h).
//
// encode(): optional BOS; the vocabulary's literal tokens (GGUF control/user-defined/unknown
// pieces, Hugging Face added_tokens) matched first, with their lstrip/rstrip; each text run (the
// text, or the text after a literal token) gets the dummy-prefix space; spaces become the
// vocabulary's space symbol; the text
// is split into UTF-8 characters and the adjacent pair whose concatenation is the
// highest-scoring normal piece is merged repeatedly (ties: leftmost), with a priority queue
// over adjacent pairs and a linked list of symbols (O(n log n), as llama.cpp's
// llm_tokenizer_spm); characters left without a piece fall back to <0xXX> byte tokens.
// This reproduces llama2.c run.c's encode() (which does the same merges by rescanning).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/tokenizer/tokenizer.h"
#include "base.h"

namespace tessera::tok {

enum class PieceKind : uint8_t { kNormal, kUnknown, kControl, kUserDefined, kUnused, kByte };

struct SpmVocab {
  std::string source;               // file name for error messages
  std::vector<std::string> pieces;  // as stored in the file
  std::vector<float> scores;        // same size as pieces
  std::vector<PieceKind> kinds;     // same size as pieces
  std::string space = " ";          // how pieces spell a space: " " or "\xE2\x96\x81"
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  bool add_bos = true;
  bool add_space_prefix = true;
  // Tokens matched literally in the text before anything else (ids within `pieces`); a
  // llama2.c tokenizer.bin has none.
  std::vector<AddedToken> literal;
  StripSpaces strip_spaces = StripSpaces::kUnicode;  // what their lstrip/rstrip swallow
  bool prefix_first_run_only = false;    // dummy prefix only for a run at the start of the text
  // Hugging Face Metaspace: no dummy prefix for a run that already starts with the space
  // symbol (" x" is "▁x", not "▁▁x"); the Prepend normalizer and llama.cpp always prefix.
  bool prefix_unless_spaced = false;
  // User-defined pieces may also be produced by merges (Hugging Face tokenizer.json: an added
  // token that is in model.vocab, such as Gemma 3's runs of U+2581, is an ordinary BPE result
  // too); otherwise they are only matched literally.
  bool merge_user_defined = false;
};

// Validates the vocabulary (sizes agree, ids in range) and builds the tokenizer.
Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(SpmVocab vocab);

// Reads a llama2.c tokenizer.bin: int32 max_token_length, then per token float score,
// int32 length, bytes. The vocabulary size is the number of records in the file.
Result<std::unique_ptr<Tokenizer>> load_llama2c_tokenizer(const std::string& path);

}  // namespace tessera::tok
