#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <algorithm>

namespace tessera::worker::testutil {

int32_t Llama2cVocab::id(const std::string& piece) const {
  auto it = lookup.find(piece);
  return it == lookup.end() ? -1 : it->second;
}

Llama2cVocab read_llama2c_vocab(const std::string& path) {
  const std::string d = read_file(path);
  Llama2cVocab v;
  size_t off = 4;
  while (off + 8 <= d.size()) {
    float score;
    int32_t len;
    std::memcpy(&score, d.data() + off, 4);
    std::memcpy(&len, d.data() + off + 4, 4);
    off += 8;
    v.pieces.push_back(d.substr(off, static_cast<size_t>(len)));
    v.scores.push_back(score);
    off += static_cast<size_t>(len);
  }
  for (size_t i = 0; i < v.pieces.size(); ++i) v.lookup.emplace(v.pieces[i], static_cast<int32_t>(i));
  return v;
}

std::vector<int32_t> reference_encode(const Llama2cVocab& v, const std::string& text, bool bos) {
  auto find = [&](const std::string& s) { return v.id(s); };
  std::vector<int32_t> tokens;
  if (bos) tokens.push_back(1);
  if (!text.empty()) tokens.push_back(find(" "));
  std::string buf;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c & 0xC0) != 0x80) buf.clear();
    buf.push_back(c);
    if (i + 1 < text.size() && (text[i + 1] & 0xC0) == 0x80 && buf.size() < 4) continue;
    const int32_t id = find(buf);
    if (id != -1) {
      tokens.push_back(id);
    } else {
      for (char b : buf) tokens.push_back(static_cast<unsigned char>(b) + 3);
    }
    buf.clear();
  }
  while (true) {
    float best_score = -1e10f;
    int32_t best_id = -1;
    size_t best_idx = 0;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      const int32_t id = find(v.pieces[static_cast<size_t>(tokens[i])] + v.pieces[static_cast<size_t>(tokens[i + 1])]);
      if (id != -1 && v.scores[static_cast<size_t>(id)] > best_score) {
        best_score = v.scores[static_cast<size_t>(id)];
        best_id = id;
        best_idx = i;
      }
    }
    if (best_id == -1) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_idx) + 1);
  }
  return tokens;
}

bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    size_t n;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  std::string data(static_cast<size_t>(std::max<std::streamoff>(0, f.tellg())), '\0');
  f.seekg(0);
  f.read(data.data(), static_cast<std::streamsize>(data.size()));
  return data;
}

void write_file(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
  EXPECT_TRUE(f.good()) << "cannot write " << path;
}

std::unique_ptr<Tokenizer> must_load(const std::string& path) {
  auto r = load_tokenizer(path);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
  if (!r.ok()) return nullptr;
  return std::move(r).value();
}

}  // namespace tessera::worker::testutil
