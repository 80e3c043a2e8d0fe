#include "base.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "utf8.h"

namespace tessera::tok {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Unicode White_Space beyond ASCII (as Rust's char::is_whitespace).
bool is_unicode_space(uint32_t cp) {
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// The code point of the well-formed UTF-8 character s[i, i + len).
uint32_t decode_utf8(std::string_view s, size_t i, size_t len) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k])); };
  switch (len) {
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    default: return b(0);
  }
}
bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

}  // namespace

Result<std::string> read_whole_file(const std::string& path, std::string_view what) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) return make_error(ErrorCode::kIoError, path + ": cannot open " + std::string(what) + ": " + std::strerror(errno));
  std::string data;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) data.append(buf, n);
  if (std::ferror(f.get())) return make_error(ErrorCode::kIoError, path + ": read failed: " + std::strerror(errno));
  return data;
}

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, StripSpaces strip) : strip_(strip) {
  std::erase_if(tokens, [](const AddedToken& t) { return t.content.empty() || t.id < 0; });
  std::stable_sort(tokens.begin(), tokens.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  tokens_ = std::move(tokens);
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    by_first_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  }
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  size_t run_start = 0;  // start of the pending plain-text run
  size_t i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (uint32_t k : by_first_[static_cast<unsigned char>(text[i])]) {
      const AddedToken& t = tokens_[k];
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      if (t.single_word) {
        const size_t end = i + t.content.size();
        if ((i > 0 && is_word_byte(text[i - 1])) || (end < text.size() && is_word_byte(text[end]))) continue;
      }
      hit = &t;
      break;
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t run_end = i;
    if (hit->lstrip) {
      for (size_t n; run_end > run_start && (n = space_before(text.substr(run_start), run_end - run_start)) > 0;) run_end -= n;
    }
    if (run_end > run_start) out.push_back({text.substr(run_start, run_end - run_start), -1});
    out.push_back({{}, hit->id});
    i += hit->content.size();
    if (hit->rstrip) {
      for (size_t n; i < text.size() && (n = space_after(text, i)) > 0;) i += n;
    }
    run_start = i;
  }
  if (run_start < text.size()) out.push_back({text.substr(run_start), -1});
}

size_t AddedTokenMatcher::space_after(std::string_view text, size_t i) const {
  if (is_space(text[i])) return 1;
  if (strip_ == StripSpaces::kAscii || static_cast<unsigned char>(text[i]) < 0x80) return 0;
  const size_t len = utf8_char_len(text, i);
  return len > 1 && is_unicode_space(decode_utf8(text, i, len)) ? len : 0;
}

size_t AddedTokenMatcher::space_before(std::string_view text, size_t i) const {
  if (is_space(text[i - 1])) return 1;
  if (strip_ == StripSpaces::kAscii) return 0;
  for (size_t len = 2; len <= 3 && len <= i; ++len) {  // White_Space beyond ASCII is 2 or 3 bytes long
    if (utf8_char_len(text, i - len) == len) return is_unicode_space(decode_utf8(text, i - len, len)) ? len : 0;
  }
  return 0;
}

std::string TokenizerBase::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return bytes_[static_cast<size_t>(id)];
}

bool TokenizerBase::is_control(int32_t id) const {
  return id >= 0 && id < vocab_size() && control_[static_cast<size_t>(id)] != 0;
}

int32_t TokenizerBase::token_id(std::string_view piece) const {
  auto it = piece_to_id_.find(piece);
  return it == piece_to_id_.end() ? -1 : it->second;
}

std::string TokenizerBase::decode(std::span<const int32_t> ids) const {
  std::string raw;
  bool first = strip_first_space_;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;  // out-of-vocabulary ids decode to nothing
    const std::string& b = bytes_[static_cast<size_t>(id)];
    if (first && !is_control(id)) {
      first = false;
      raw.append(b, !b.empty() && b[0] == ' ' ? 1 : 0);
    } else {
      raw += b;
    }
  }
  return sanitize_utf8(raw);
}

}  // namespace tessera::tok
