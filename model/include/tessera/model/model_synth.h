// Deterministic random-weight GGUF models shaped like real ones (`tessera model synth`): the
// common file for speed comparisons with llama.cpp, which loads them too.
//
// Values: each tensor's f32 values come from a counter-based generator seeded by
// (seed, tensor name), so a tensor has the same values whatever the output dtype: matrices
// uniform with std 0.02, norm weights uniform in [0.95, 1.05], biases uniform with std 0.02.
// The dtype (f32 | f16 | q8_0) applies to every 2-D weight; norms and biases stay f32. With
// q8_0, a matrix whose rows are not a multiple of 32 stays f32 (as llama.cpp's quantizer
// falls back). Q8_0 blocks are bit-identical to ggml's quantize_row_q8_0_ref.
// Metadata: general.*, <arch>.* hyperparameters, general.alignment = 32, and a vocabulary:
// by default a synthetic SentencePiece "llama" vocab (<unk>, <s>, </s>, 256 <0xXX> byte
// tokens, then distinct pieces with scores), or a tokenizer.json's byte-level BPE ("gpt2").
// Stateless functions; safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/dtype.h"
#include "tessera/common/result.h"

namespace tessera {

struct SynthShape {
  std::string like;          // "smollm2-135m"
  std::string architecture;  // llama | qwen2
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, context_length;
  float rope_theta, rms_eps;
  bool tied;
  bool attn_bias;
};

// The known shapes (smollm2-135m, llama-1b, stories260k, qwen2-0.5b), and lookup by name
// (kInvalidArgument listing the known names).
const std::vector<SynthShape>& synth_shapes();
Result<SynthShape> synth_shape(const std::string& like);

struct SynthOptions {
  std::string like;
  DType dtype = DType::kF32;  // kF32, kF16 or kQ8_0
  std::string out_path;
  uint64_t seed = 0;
  std::string vocab_from;  // tokenizer.json (HF byte-level BPE), or "" for the synthetic SentencePiece vocab
};

// Writes the GGUF file. Errors: kInvalidArgument (unknown shape or dtype), kIoError,
// kCorruptFile (unreadable --vocab-from file), kOutOfRange (a token id beyond the shape's vocabulary).
Status synth_model(const SynthOptions& options);

}  // namespace tessera
