// tessera_tokenizer (depends on tessera_common only).
// Tokenizers: SentencePiece-style BPE with scores and byte fallback (llama2.c tokenizer.bin,
// GGUF "llama" vocab) and Hugging Face byte-level BPE (tokenizer.json, GGUF "gpt2" vocab).
//
// A Tokenizer is immutable after construction and safe to use from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/common/vocab.h"

namespace tessera {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // add_special: SentencePiece prepends BOS (when the vocab says so); byte-level BPE adds
  // nothing unless its post-processor says so. Special/added tokens that appear literally in
  // `text` (e.g. "<|im_start|>") are matched as single tokens. (Which tokens: HF added_tokens;
  // GGUF control/user-defined tokens. A llama2.c tokenizer.bin has none: its BOS/EOS pieces
  // are never matched in text.)
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special) const = 0;

  // The raw bytes of one token, as it contributes to decoded text (byte-fallback tokens give
  // their byte; SentencePiece U+2581 becomes ' '; byte-level BPE maps back to bytes). Control
  // tokens (BOS/EOS) give "". May be an incomplete UTF-8 sequence.
  // Byte-level BPE added/special tokens ("<|im_start|>") give their literal text, as Hugging
  // Face's decode does, so that decode(encode(t)) == t. Ids outside the vocabulary give "".
  virtual std::string token_bytes(int32_t id) const = 0;

  // Decodes a whole sequence. SentencePiece drops the dummy-prefix space of the first piece.
  // Ill-formed UTF-8 (e.g. a lone byte-fallback token) becomes U+FFFD, one per maximal
  // ill-formed subsequence, so the result is always valid UTF-8.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 if none
  virtual int32_t eos_id() const = 0;  // -1 if none
  // Token id of an exact piece/added-token string ("<|im_end|>"), or -1.
  virtual int32_t token_id(std::string_view piece) const = 0;
  virtual bool is_control(int32_t id) const = 0;
  // True when encode() prepends a dummy-prefix space that decode() drops from the first
  // non-control piece (SentencePiece with add_space_prefix).
  virtual bool strips_first_space() const { return false; }
};

// Loads a tokenizer file: llama2.c tokenizer.bin, tokenizer.json (or a directory holding it).
// A .gguf model file is refused with kInvalidArgument: its embedded vocabulary is read by the
// model library (read_model_vocab in tessera/model/model.h) and built with tokenizer_from_vocab,
// which keeps this library free of model-file parsing (it depends on tessera_common only).
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path);
// Builds a tokenizer from a vocabulary embedded in a model file.
Result<std::unique_ptr<Tokenizer>> tokenizer_from_vocab(const VocabSpec& vocab);

// Turns a stream of token ids into text without ever emitting a broken UTF-8 sequence:
// bytes of an incomplete code point are held until it completes. One per sequence.
class IncrementalDecoder {
 public:
  // sequence_start: the ids begin a sequence, so the dummy-prefix space of the first piece is
  // dropped exactly as decode() drops it. Pass false when the ids continue a sequence whose
  // start was not pushed (e.g. streaming a completion after its prompt).
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool sequence_start = true)
      : tok_(tokenizer), first_(sequence_start) {}
  // Returns the text that became complete with this token (possibly empty).
  std::string push(int32_t id);
  // Returns whatever is held (invalid trailing bytes become U+FFFD) and resets the UTF-8 state
  // (the first-piece state is kept). For any ids, the concatenation of every push() and the
  // final flush() equals tokenizer.decode(ids). Ill-formed bytes become U+FFFD as soon as they
  // are known to be ill-formed.
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
  bool first_ = true;    // SentencePiece: strip the dummy-prefix space of the first piece
};

}  // namespace tessera
