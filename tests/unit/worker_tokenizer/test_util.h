// Helpers for the tokenizer tests: an independent reader of llama2.c tokenizer.bin files,
// a straightforward port of llama2.c run.c's encode() (the reference the fast implementation
// must match), a strict UTF-8 validator and small file utilities.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/tokenizer/tokenizer.h"

namespace tessera::worker::testutil {

struct Llama2cVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::map<std::string, int32_t> lookup;  // piece -> first id, like run.c's sorted vocab + bsearch
  int32_t id(const std::string& piece) const;  // -1 if absent
};

Llama2cVocab read_llama2c_vocab(const std::string& path);

// llama2.c run.c encode(): BOS, dummy prefix " ", code points looked up (bytes + 3 when
// absent), then repeatedly merge the leftmost best-scoring adjacent pair. O(n^2); short input.
std::vector<int32_t> reference_encode(const Llama2cVocab& v, const std::string& text, bool bos);

// Strict UTF-8 check (no overlongs, surrogates or code points above U+10FFFF).
bool is_valid_utf8(const std::string& s);

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& data);

// Loads or fails the test.
std::unique_ptr<Tokenizer> must_load(const std::string& path);

}  // namespace tessera::worker::testutil
