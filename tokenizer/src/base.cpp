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

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) {
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
      while (run_end > run_start && is_space(text[run_end - 1])) --run_end;
    }
    if (run_end > run_start) out.push_back({text.substr(run_start, run_end - run_start), -1});
    out.push_back({{}, hit->id});
    i += hit->content.size();
    if (hit->rstrip) {
      while (i < text.size() && is_space(text[i])) ++i;
    }
    run_start = i;
  }
  if (run_start < text.size()) out.push_back({text.substr(run_start), -1});
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
