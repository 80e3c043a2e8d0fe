// Lexer: template source -> tokens, with jinja2's whitespace rules (`-`/`+` markers,
// trim_blocks, lstrip_blocks, one trailing newline dropped, \r\n normalized to \n).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/jinja/template.h"

namespace tessera::jinja::internal {

enum class Tok { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type = Tok::kEof;
  std::string text;   // data, name, operator, or the unescaped string literal / number text
  size_t offset = 0;  // byte offset in the normalized source
};

// Maps byte offsets to 1-based line and column.
class SourceMap {
 public:
  explicit SourceMap(std::string_view source);
  std::string where(size_t offset) const;  // "line 3, column 7"

 private:
  std::vector<size_t> line_starts_;
};

std::string normalize_source(std::string_view source, const TemplateOptions& options);
Result<std::vector<Token>> tokenize(const std::string& source, const TemplateOptions& options, const SourceMap& map);

}  // namespace tessera::jinja::internal
