// Shared state and behaviour of the tokenizer implementations (private to worker):
// the id -> bytes table, exact piece lookup, control flags, decode(), and literal matching of
// added/special tokens. SentencePiece BPE (spm.h) and byte-level BPE (bpe.h) derive from it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::tok {

// Reads a whole file; errors name the file and say what it was meant to be (`what`).
Result<std::string> read_whole_file(const std::string& path, std::string_view what);

// Heterogeneous hashing so maps keyed by std::string can be probed with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using PieceMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// A token matched literally in the input before any other processing (HF "added_tokens",
// GGUF control/user-defined tokens).
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool lstrip = false;       // swallow whitespace to the left of a match
  bool rstrip = false;       // swallow whitespace to the right of a match
  bool single_word = false;  // only match when not inside a word
};

// What lstrip/rstrip swallow: Hugging Face tokenizers strip Unicode White_Space (Rust's
// char::is_whitespace: also U+00A0, U+3000, U+2028, ...); llama.cpp strips isspace() bytes.
enum class StripSpaces : uint8_t { kUnicode, kAscii };

// Splits text into plain-text runs and literal added-token matches, leftmost-longest.
// Immutable after construction; thread-safe.
class AddedTokenMatcher {
 public:
  struct Segment {
    std::string_view text;  // the plain text (empty for a token)
    int32_t id = -1;        // >= 0: an added token
  };
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens, StripSpaces strip = StripSpaces::kUnicode);
  bool empty() const { return tokens_.empty(); }
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  size_t space_after(std::string_view text, size_t i) const;  // bytes of the whitespace char at i (0: none)
  size_t space_before(std::string_view text, size_t i) const;  // same for the char that ends at i

  std::vector<AddedToken> tokens_;                 // longest first
  StripSpaces strip_ = StripSpaces::kUnicode;
  std::array<std::vector<uint32_t>, 256> by_first_;  // indices into tokens_, by first byte
};

// Implements everything of Tokenizer except encode(). Derived classes fill the protected
// tables in their constructor; nothing changes afterwards.
class TokenizerBase : public Tokenizer {
 public:
  std::string token_bytes(int32_t id) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(bytes_.size()); }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  int32_t token_id(std::string_view piece) const override;
  bool is_control(int32_t id) const override;
  bool strips_first_space() const override { return strip_first_space_; }

 protected:
  std::vector<std::string> bytes_;  // per id: the bytes it decodes to
  std::vector<uint8_t> control_;    // per id: 1 for control tokens
  PieceMap piece_to_id_;            // exact piece / added-token text -> id
  AddedTokenMatcher added_;
  int32_t bos_ = -1;
  int32_t eos_ = -1;
  bool strip_first_space_ = false;
};

}  // namespace tessera::tok
