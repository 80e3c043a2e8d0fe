// Hugging Face tokenizer.json loading (private to worker).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/tokenizer/tokenizer.h"
#include "pretokenize.h"

namespace tessera::tok {

// Loads a tokenizer.json whose model is BPE: byte-level (GPT-2 / SmolLM2 / Llama 3 layout,
// served by bpe.h) or SentencePiece-style (U+2581 pieces with byte_fallback, Llama 2 /
// Mistral layout, served by spm.h with scores derived from merge ranks). BOS/EOS ids come
// from a tokenizer_config.json or config.json beside the file, else from the post-processor.
// Unsupported parts (another model type, a normalizer, an unknown pre-tokenizer) are
// kUnsupported errors naming the part; bad JSON is kMalformedMessage with the position.
Result<std::unique_ptr<Tokenizer>> load_hf_tokenizer_json(const std::string& path);

// The pre-tokenizer pipeline llama.cpp uses for a GGUF "gpt2" vocabulary's tokenizer.ggml.pre
// ("default", "gpt2", "smollm", "llama-bpe", "qwen2", ...). Unknown names are kUnsupported.
Result<std::vector<PreTokenizerStep>> gguf_pre_tokenizer(std::string_view pre);

}  // namespace tessera::tok
