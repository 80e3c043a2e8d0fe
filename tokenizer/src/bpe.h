// Byte-level BPE (GPT-2 / Hugging Face tokenizers style; private to worker).
//
// encode(): added tokens are matched literally first (leftmost-longest); each remaining text
// run goes through the pre-tokenizer pipeline (regex splits, ByteLevel); each pre-token's
// bytes start as one symbol per byte and the adjacent pair with the lowest merge rank is
// merged repeatedly (ties: leftmost) with a priority queue over a linked list of symbols.
// Results for short pre-tokens are cached.
//
// Vocabulary strings arrive in the byte-to-unicode spelling of GPT-2 ("Ġthe") and are stored
// as raw bytes, so the byte-level mapping costs nothing at encode or decode time.
//
// Immutable after construction except for the word cache, which is guarded by a mutex:
// thread-safe.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/tokenizer/tokenizer.h"
#include "base.h"
#include "normalize.h"
#include "pretokenize.h"

namespace tessera::tok {

struct BpeAddedToken {
  AddedToken token;      // content is raw text
  bool special = false;  // control token (is_control)
};

struct ByteLevelBpeSpec {
  std::string source;                // file name for error messages
  std::vector<std::string> vocab;    // id -> byte-level spelled token ("" for an unused id)
  std::vector<std::pair<std::string, std::string>> merges;  // by rank, byte-level spelled
  std::vector<BpeAddedToken> added;  // matched literally; ids may extend the vocabulary
  Normalizer normalizer;             // applied to the text between added tokens, before `pre`
  std::vector<PreTokenizerStep> pre;  // must end with a ByteLevel step
  bool ignore_merges = false;        // a pre-token that is a whole token is not merged
  std::vector<int32_t> prefix_ids;   // added by encode(add_special = true)
  std::vector<int32_t> suffix_ids;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
};

Result<std::unique_ptr<Tokenizer>> make_byte_level_bpe(ByteLevelBpeSpec spec);

// GPT-2's bytes_to_unicode(): the printable stand-in for each byte.
std::string byte_to_unicode(unsigned char b);

}  // namespace tessera::tok
