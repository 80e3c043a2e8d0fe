// load_tokenizer() (format detection) and tokenizer_from_vocab() (GGUF-embedded vocabularies).
#include <cerrno>
#include <cstring>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "tessera/tokenizer/tokenizer.h"
#include "bpe.h"
#include "hf_json.h"
#include "spm.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using tok::PieceKind;

Result<std::unique_ptr<Tokenizer>> spm_from_vocab(const VocabSpec& v) {
  const size_t n = v.tokens.size();
  if (!v.token_types.empty() && v.token_types.size() != n) {
    return make_error(ErrorCode::kCorruptFile, "tokenizer.ggml.token_type has " + std::to_string(v.token_types.size()) +
                                                   " entries for " + std::to_string(n) + " tokens");
  }
  tok::SpmVocab s;
  s.source = "GGUF vocabulary";
  s.pieces = v.tokens;
  s.scores = v.scores;
  s.kinds.assign(n, PieceKind::kNormal);
  for (size_t i = 0; i < n; ++i) {
    if (v.token_types.empty()) {
      const std::string& p = v.tokens[i];
      if (p.size() == 6 && p.starts_with("<0x") && p.back() == '>') s.kinds[i] = PieceKind::kByte;
      continue;
    }
    switch (v.token_types[i]) {
      case 1: s.kinds[i] = PieceKind::kNormal; break;
      case 2: s.kinds[i] = PieceKind::kUnknown; break;
      case 3: s.kinds[i] = PieceKind::kControl; break;
      case 4: s.kinds[i] = PieceKind::kUserDefined; break;
      case 5: s.kinds[i] = PieceKind::kUnused; break;
      case 6: s.kinds[i] = PieceKind::kByte; break;
      default:
        return make_error(ErrorCode::kCorruptFile, "token " + std::to_string(i) + " has unknown token type " +
                                                        std::to_string(v.token_types[i]));
    }
  }
  if (v.token_types.empty()) {
    for (int32_t id : {v.bos_id, v.eos_id}) {
      if (id >= 0 && static_cast<size_t>(id) < n) s.kinds[static_cast<size_t>(id)] = PieceKind::kControl;
    }
    if (v.unk_id >= 0 && static_cast<size_t>(v.unk_id) < n) s.kinds[static_cast<size_t>(v.unk_id)] = PieceKind::kUnknown;
  }
  s.space = "\xE2\x96\x81";  // U+2581
  s.bos_id = v.bos_id;
  s.eos_id = v.eos_id;
  s.unk_id = v.unk_id;
  s.add_bos = v.add_bos;
  s.add_space_prefix = v.add_space_prefix;
  // Control, user-defined and unknown pieces are matched literally, as llama.cpp does
  // (parse_special); it strips isspace() bytes, and for a model whose general.name says Phi-3 it
  // gives every such token but <unk>, <s> and <|endoftext|> rstrip (and </s> too), as Phi-3's
  // tokenizer.json does: "<|user|>\nHi" is <|user|> ▁Hi.
  const bool phi3 = [&] {
    std::string name = v.name;
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;
  }();
  s.strip_spaces = tok::StripSpaces::kAscii;
  for (size_t i = 0; i < n; ++i) {
    const PieceKind k = s.kinds[i];
    if (k != PieceKind::kControl && k != PieceKind::kUserDefined && k != PieceKind::kUnknown) continue;
    const std::string& p = s.pieces[i];
    const bool rstrip = phi3 && (p == "</s>" || (p != "<unk>" && p != "<s>" && p != "<|endoftext|>"));
    s.literal.push_back({.content = p, .id = static_cast<int32_t>(i), .rstrip = rstrip});
  }
  return tok::make_spm_tokenizer(std::move(s));
}

Result<std::unique_ptr<Tokenizer>> bpe_from_vocab(const VocabSpec& v) {
  const size_t n = v.tokens.size();
  if (!v.token_types.empty() && v.token_types.size() != n) {
    return make_error(ErrorCode::kCorruptFile, "tokenizer.ggml.token_type has " + std::to_string(v.token_types.size()) +
                                                   " entries for " + std::to_string(n) + " tokens");
  }
  tok::ByteLevelBpeSpec spec;
  spec.source = "GGUF vocabulary";
  TS_ASSIGN_OR_RETURN(spec.pre, tok::gguf_pre_tokenizer(v.pre));
  for (size_t i = 0; i < n; ++i) {
    const int32_t type = v.token_types.empty() ? 1 : v.token_types[i];
    if (type == 3 || type == 4) {
      // Control and user-defined tokens are matched literally and spelled as plain text.
      spec.added.push_back({.token = {.content = v.tokens[i], .id = static_cast<int32_t>(i)}, .special = type == 3});
    }
  }
  spec.vocab = v.tokens;
  spec.merges.reserve(v.merges.size());
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || m.find(' ', sp + 1) != std::string::npos) {
      return make_error(ErrorCode::kCorruptFile, "tokenizer.ggml.merges[" + std::to_string(i) + "] '" + m + "' is not two tokens");
    }
    spec.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  spec.bos_id = v.bos_id;
  spec.eos_id = v.eos_id;
  if (v.add_bos && v.bos_id >= 0) spec.prefix_ids.push_back(v.bos_id);
  return tok::make_byte_level_bpe(std::move(spec));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> tokenizer_from_vocab(const VocabSpec& vocab) {
  if (vocab.tokens.empty()) return make_error(ErrorCode::kNotFound, "the model file carries no tokenizer vocabulary");
  if (vocab.model == "llama") return spm_from_vocab(vocab);
  if (vocab.model == "gpt2") return bpe_from_vocab(vocab);
  return make_error(ErrorCode::kUnsupported, "unsupported tokenizer model '" + vocab.model +
                                                 "' (supported: llama = SentencePiece BPE, gpt2 = byte-level BPE)");
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const char* name : {"tokenizer.json", "tokenizer.bin"}) {
      const fs::path p = fs::path(path) / name;
      if (fs::is_regular_file(p, ec)) return load_tokenizer(p.string());
    }
    return make_error(ErrorCode::kNotFound, path + ": directory has no tokenizer.json or tokenizer.bin");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(ErrorCode::kIoError, path + ": cannot open tokenizer file: " + std::strerror(errno));
  char head[4] = {};
  f.read(head, 4);
  const auto got = static_cast<size_t>(f.gcount());
  f.close();
  if (got == 4 && std::memcmp(head, "GGUF", 4) == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      path + ": is a GGUF model file; its embedded vocabulary is read with read_model_vocab() "
                             "(tessera/model/model.h) and built with tokenizer_from_vocab()");
  }
  size_t first = 0;
  while (first < got && std::isspace(static_cast<unsigned char>(head[first]))) ++first;
  if (path.ends_with(".json") || (first < got && head[first] == '{')) return tok::load_hf_tokenizer_json(path);
  return tok::load_llama2c_tokenizer(path);
}

}  // namespace tessera
