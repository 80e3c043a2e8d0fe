// tessera_grammar (depends on tessera_common only): structured output by grammar-constrained
// decoding. A JSON Schema (the subset below) compiles into a Schema; a Matcher is a byte-level
// pushdown recognizer of the compact JSON texts the schema accepts; a TokenVocabulary (a trie
// of every token's bytes) turns a Matcher state into the set of tokens that may come next.
//
// Generated JSON is compact: no whitespace between tokens of the JSON text; object properties
// come in the schema's order; only declared properties are generated (additionalProperties is
// never used to invent keys). Supported keywords: type (a name or a list), properties,
// required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum,
// const, anyOf, oneOf, $ref to "#/$defs/..." or "#/definitions/..." (recursion allowed),
// and the annotations title, description, default, examples, $schema, $id, $comment.
// Any other keyword is refused by name (kUnsupported), never ignored. An object or schema
// without "type" and without constraints accepts any JSON value. Limits: 64 properties per
// object, 64 enum values, nesting depth 64 (schemas in schemas at compile: each property, items,
// anyOf/oneOf option and $ref target is a level; values in values in the Matcher), at most 256
// JSON arrays/objects nested in the schema text (checked before parsing), numbers of at most 24
// characters with at most 2 exponent digits (every generated number is a finite double).
// Compiling costs time linear in the schema's size (path strings are built only for errors).
//
// Budget: Matcher::min_remaining() is the exact number of bytes of the shortest completion;
// allowed_tokens() with a token budget only allows tokens after which the value can still be
// completed within the budget by single-byte tokens, so a request that stops at max_tokens
// still ends with a complete value whenever its vocabulary has every byte as a token
// (SentencePiece byte fallback, byte-level BPE).
//
// Ownership and threads: a Schema and a TokenVocabulary are immutable and shared (shared_ptr /
// const&) by any number of threads; a Matcher is a small value owned by one request.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"

namespace tessera::grammar {

struct Node;
struct Schema;  // opaque compiled grammar

// Compiles a JSON Schema given as JSON text. Errors (kInvalidArgument for malformed schemas,
// kUnsupported for keywords outside the subset) name the schema path, e.g. "/properties/age:
// keyword 'minimum' is not supported".
Result<std::shared_ptr<const Schema>> compile_json_schema(std::string_view schema_json);

// The grammar of response_format json_object: any JSON object.
std::shared_ptr<const Schema> any_json_object();

// The grammar text a request carries for json_object (compile_json_schema accepts it).
inline constexpr std::string_view kJsonObjectSchema = R"({"type":"object"})";

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Schema> schema);

  // Consumes one byte (or all of `bytes`); false when the text can no longer be a prefix of an
  // accepted value (the matcher is then dead: every later feed fails).
  bool feed(uint8_t c);
  bool feed(std::string_view bytes);
  bool dead() const { return dead_; }
  // The bytes so far form a complete value (more bytes may still extend it, e.g. a number).
  bool complete() const;
  // Bytes of the shortest completion of the text so far (0 when complete; -1 when dead).
  int32_t min_remaining() const;
  // When the innermost open value is a string between two characters (not inside an escape or
  // a UTF-8 sequence): `room`, how many more characters it may take (INT32_MAX when unbounded),
  // and `short_by`, how many it still needs to reach its minLength. Else room = -1.
  struct StringRoom {
    int32_t room = -1;
    int32_t short_by = 0;
  };
  StringRoom free_string_room() const;

  struct Frame {
    const Node* node = nullptr;
    uint8_t stage = 0;
    uint8_t aux = 0;
    int32_t count = 0;
    int32_t pos = 0;
    uint64_t mask = 0;
  };

 private:
  enum class Step : uint8_t { kConsumed, kReject, kPopRetry, kRetry, kDone };
  Step step(Frame& f, uint8_t c);
  void child_done();
  int32_t frame_remaining(const Frame& f) const;

  std::shared_ptr<const Schema> schema_;
  std::vector<Frame> stack_;  // innermost value last; empty once the root value has ended
  bool dead_ = false;
};

// The vocabulary as bytes: token id -> the bytes it adds to the text (Tokenizer::token_bytes).
// Tokens with no bytes (control tokens) are never allowed inside a value.
class TokenVocabulary {
 public:
  explicit TokenVocabulary(const std::vector<std::string>& token_bytes);
  int32_t size() const { return size_; }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

  // Writes to `out` (cleared first) the tokens that may follow `m`: those whose bytes keep the
  // text a prefix of an accepted value, plus `end_tokens` once the value is complete. With
  // budget > 0 (tokens still allowed, this one included), only tokens after which the value
  // can be completed in budget - 1 single-byte tokens (end tokens always, when complete).
  // Cost: inside a string (the widest masks) the "plain" tokens — printable text without '"',
  // '\\' or an incomplete UTF-8 sequence — are taken as one precomputed run, and only the
  // others walk the trie; elsewhere the trie walk stops at the first byte the grammar refuses.
  void allowed_tokens(const Matcher& m, int32_t budget, std::span<const int32_t> end_tokens,
                      std::vector<int32_t>* out) const;

 private:
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node index, sorted by byte
    std::vector<int32_t> tokens;                        // tokens whose bytes end here
  };
  static void insert(std::vector<TrieNode>& trie, const std::string& bytes, int32_t id);
  void walk(const std::vector<TrieNode>& trie, const Matcher& m, int32_t budget, std::vector<int32_t>* out) const;

  int32_t size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<TrieNode> trie_;          // every token; [0] is the root (the empty prefix)
  std::vector<TrieNode> special_trie_;  // the tokens that are not plain string text
  std::vector<int32_t> plain_;          // plain string tokens, by character count ascending
  std::vector<int32_t> plain_chars_;    // their character counts (parallel to plain_)
};

}  // namespace tessera::grammar
