// The vocabulary a model file embeds (GGUF tokenizer.ggml.*): the data a tokenizer is built from
// (tessera/tokenizer/tokenizer.h: tokenizer_from_vocab) and that the model loaders produce
// (tessera/model/model.h: Model::vocab, read_model_vocab). A plain value type; no invariants
// beyond those documented per field (checked by tokenizer_from_vocab).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// The vocabulary embedded in a model file (GGUF tokenizer.ggml.*). Empty `tokens` when the
// file carries none (llama2.c, safetensors: the tokenizer is a separate file).
struct VocabSpec {
  std::string model;                 // "llama" (SentencePiece BPE) | "gpt2" (byte-level BPE)
  std::string pre;                   // GGUF tokenizer.ggml.pre, e.g. "smollm", "default"
  std::vector<std::string> tokens;   // piece text (SentencePiece pieces use U+2581 for space)
  std::vector<float> scores;         // may be empty
  std::vector<int32_t> token_types;  // GGUF token types (1 normal, 2 unknown, 3 control, 4 user, 6 byte); may be empty
  std::vector<std::string> merges;   // "a b" per line, gpt2 only
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = true;
  bool add_space_prefix = true;
  std::string chat_template;  // tokenizer.chat_template, if present
  std::string name;           // general.name, if present (llama.cpp keys Phi-3's rstrip tokens on it)
};

}  // namespace tessera
