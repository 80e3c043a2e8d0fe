#include "lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "tessera/jinja/value.h"

namespace tessera::jinja::internal {

SourceMap::SourceMap(std::string_view source) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\n') line_starts_.push_back(i + 1);
  }
}

std::string SourceMap::where(size_t offset) const {
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  size_t line = static_cast<size_t>(it - line_starts_.begin());
  size_t col = offset - line_starts_[line - 1] + 1;
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

std::string normalize_source(std::string_view source, const TemplateOptions& options) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!options.keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string rstrip_ws(std::string_view s) {
  size_t n = s.size();
  while (n > 0 && (is_ws(s[n - 1]) || (s[n - 1] >= 0x1c && s[n - 1] <= 0x1f))) --n;
  return std::string(s.substr(0, n));
}

// Python-style string literal unescaping (what jinja2 does to '...' and "..." literals).
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    char c = s[++i];
    auto hex = [&](size_t n) -> long {
      if (i + n >= s.size()) return -1;
      std::string h(s.substr(i + 1, n));
      for (char x : h) {
        if (!std::isxdigit(static_cast<unsigned char>(x))) return -1;
      }
      i += n;
      return std::stol(h, nullptr, 16);
    };
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '0': out += '\0'; break;
      case '\n': break;
      case 'x':
      case 'u':
      case 'U': {
        long v = hex(c == 'x' ? 2 : c == 'u' ? 4 : 8);
        if (v < 0) {
          out += '\\';
          out += c;
        } else {
          out += utf8_encode({static_cast<uint32_t>(v)});
        }
        break;
      }
      default:
        out += '\\';
        out += c;
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(const std::string& src, const TemplateOptions& o, const SourceMap& map) : s_(src), o_(o), map_(map) {}

  Result<std::vector<Token>> run() {
    while (pos_ < s_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit(Tok::kData, s_.substr(pos_), pos_);
        break;
      }
      char kind = s_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
      std::string text = s_.substr(pos_, tag - pos_);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && o_.lstrip_blocks && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting_) {
          bool all_ws = l_pos < text.size();
          for (size_t i = l_pos; i < text.size(); ++i) all_ws = all_ws && is_ws(text[i]);
          if (all_ws) text.resize(l_pos);
        }
      }
      emit(Tok::kData, text, pos_);
      pos_ = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      line_starting_ = false;
      Status st = kind == '#' ? comment(tag) : kind == '{' ? tag_body(false, tag) : block(tag);
      if (!st.ok()) return st.take_error();
    }
    tokens_.push_back(Token{Tok::kEof, "", s_.size()});
    return std::move(tokens_);
  }

 private:
  Error error(size_t at, const std::string& msg) const {
    return make_error(ErrorCode::kInvalidArgument, "template syntax error at " + map_.where(at) + ": " + msg);
  }

  void emit(Tok t, std::string text, size_t at) {
    if (t == Tok::kData && text.empty()) return;
    tokens_.push_back(Token{t, std::move(text), at});
  }

  size_t find_tag(size_t from) const {
    size_t p = from;
    while ((p = s_.find('{', p)) != std::string::npos) {
      if (p + 1 < s_.size() && (s_[p + 1] == '{' || s_[p + 1] == '%' || s_[p + 1] == '#')) return p;
      ++p;
    }
    return std::string::npos;
  }

  // After an end marker: `-` strips following whitespace, trim_blocks eats one newline.
  void after_end(char sign, bool trim_newline) {
    if (sign == '-') {
      while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
    } else if (sign != '+' && trim_newline && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
    }
    line_starting_ = pos_ > 0 && s_[pos_ - 1] == '\n';
  }

  Status comment(size_t start) {
    size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) return error(start, "missing end of comment tag");
    char sign = end > pos_ ? s_[end - 1] : '\0';
    pos_ = end + 2;
    after_end(sign == '-' || sign == '+' ? sign : '\0', o_.trim_blocks);
    return {};
  }

  // {% raw %}...{% endraw %} becomes data; otherwise a block tag's tokens.
  Status block(size_t start) {
    size_t p = pos_;
    while (p < s_.size() && is_ws(s_[p])) ++p;
    if (s_.compare(p, 3, "raw") == 0 && (p + 3 >= s_.size() || !is_name_start(s_[p + 3]))) {
      size_t q = p + 3;
      while (q < s_.size() && is_ws(s_[q])) ++q;
      char sign = '\0';
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) sign = s_[q++];
      if (s_.compare(q, 2, "%}") == 0) {
        pos_ = q + 2;
        after_end(sign, false);
        return raw(start);
      }
    }
    emit(Tok::kBlockBegin, "", start);
    return tag_body(true, start);
  }

  Status raw(size_t start) {
    size_t p = pos_;
    while ((p = s_.find("{%", p)) != std::string::npos) {
      size_t q = p + 2;
      char lsign = q < s_.size() && (s_[q] == '-' || s_[q] == '+') ? s_[q++] : '\0';
      while (q < s_.size() && is_ws(s_[q])) ++q;
      if (s_.compare(q, 6, "endraw") == 0) {
        q += 6;
        while (q < s_.size() && is_ws(s_[q])) ++q;
        char sign = q < s_.size() && (s_[q] == '-' || s_[q] == '+') ? s_[q++] : '\0';
        if (s_.compare(q, 2, "%}") == 0) {
          std::string text = s_.substr(pos_, p - pos_);
          if (lsign == '-') text = rstrip_ws(text);
          emit(Tok::kData, text, pos_);
          pos_ = q + 2;
          after_end(sign, o_.trim_blocks);
          return {};
        }
      }
      p += 2;
    }
    return error(start, "missing end of raw directive");
  }

  Status tag_body(bool is_block, size_t start) {
    if (!is_block) emit(Tok::kVarBegin, "", start);
    std::vector<char> balance;
    const char* close = is_block ? "%}" : "}}";
    while (true) {
      if (pos_ >= s_.size()) return error(start, is_block ? "unclosed block tag '{%'" : "unclosed variable tag '{{'");
      if (balance.empty()) {
        char c = s_[pos_];
        if ((c == '-' || c == '+') && s_.compare(pos_ + 1, 2, close) == 0 && (is_block || c == '-')) {
          emit(is_block ? Tok::kBlockEnd : Tok::kVarEnd, "", pos_);
          pos_ += 3;
          after_end(c, false);
          return {};
        }
        if (s_.compare(pos_, 2, close) == 0) {
          emit(is_block ? Tok::kBlockEnd : Tok::kVarEnd, "", pos_);
          pos_ += 2;
          after_end('\0', is_block && o_.trim_blocks);
          return {};
        }
      }
      char c = s_[pos_];
      if (is_ws(c)) {
        ++pos_;
        continue;
      }
      size_t at = pos_;
      if (is_digit(c)) {
        size_t p = pos_;
        while (p < s_.size() && (is_digit(s_[p]) || s_[p] == '_')) ++p;
        bool is_float = false;
        if (p + 1 < s_.size() && s_[p] == '.' && is_digit(s_[p + 1])) {
          is_float = true;
          ++p;
          while (p < s_.size() && (is_digit(s_[p]) || s_[p] == '_')) ++p;
        }
        if (p < s_.size() && (s_[p] == 'e' || s_[p] == 'E')) {
          size_t q = p + 1;
          if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
          if (q < s_.size() && is_digit(s_[q])) {
            is_float = true;
            p = q;
            while (p < s_.size() && is_digit(s_[p])) ++p;
          }
        }
        std::string num;
        for (size_t i = pos_; i < p; ++i) {
          if (s_[i] != '_') num += s_[i];
        }
        emit(is_float ? Tok::kFloat : Tok::kInt, num, at);
        pos_ = p;
        continue;
      }
      if (is_name_start(c)) {
        size_t p = pos_;
        while (p < s_.size() && (is_name_start(s_[p]) || is_digit(s_[p]))) ++p;
        emit(Tok::kName, s_.substr(pos_, p - pos_), at);
        pos_ = p;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t p = pos_ + 1;
        while (p < s_.size() && s_[p] != c) p += (s_[p] == '\\') ? 2 : 1;
        if (p >= s_.size()) return error(at, "unterminated string");
        emit(Tok::kString, unescape(std::string_view(s_).substr(pos_ + 1, p - pos_ - 1)), at);
        pos_ = p + 1;
        continue;
      }
      static const char* kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
      std::string op;
      for (const char* o : kOps2) {
        if (s_.compare(pos_, 2, o) == 0) op = o;
      }
      if (op.empty()) {
        if (std::strchr("+-/*%~[](){}><=.:|,;", c) == nullptr) {
          return error(at, std::string("unexpected character '") + c + "'");
        }
        op = std::string(1, c);
      }
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty()) return error(at, "unexpected '" + op + "'");
        if (balance.back() != op[0]) {
          return error(at, "unexpected '" + op + "', expected '" + std::string(1, balance.back()) + "'");
        }
        balance.pop_back();
      }
      emit(Tok::kOp, op, at);
      pos_ += op.size();
    }
  }

  const std::string& s_;
  const TemplateOptions& o_;
  const SourceMap& map_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> tokenize(const std::string& source, const TemplateOptions& options, const SourceMap& map) {
  return Lexer(source, options, map).run();
}

}  // namespace tessera::jinja::internal
