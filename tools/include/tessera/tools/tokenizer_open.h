// Opens a tokenizer from any file a user may name: a GGUF model (its embedded vocabulary, read
// by the model library), tokenizer.json (or its directory) or a llama2.c tokenizer.bin (the
// tokenizer library). Joins the two libraries, which do not depend on each other.
#pragma once

#include <memory>
#include <string>

#include "tessera/model/model.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::tools {

inline Result<std::unique_ptr<Tokenizer>> open_any_tokenizer(const std::string& path) {
  if (path.ends_with(".gguf")) {
    TS_ASSIGN_OR_RETURN(VocabSpec vocab, read_model_vocab(path));
    if (vocab.tokens.empty()) return make_error(ErrorCode::kNotFound, path + ": embeds no vocabulary");
    auto tok = tokenizer_from_vocab(vocab);
    if (!tok.ok()) return make_error(tok.error().code, path + ": " + tok.error().message);
    return tok;
  }
  return load_tokenizer(path);
}

}  // namespace tessera::tools
