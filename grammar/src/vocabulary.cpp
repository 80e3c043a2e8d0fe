// TokenVocabulary: a byte trie of the vocabulary, walked depth-first with a Matcher so that a
// prefix the grammar rejects prunes every token that starts with it; inside a string, the plain
// text tokens are one precomputed run (grammar.h).
#include <algorithm>
#include <climits>
#include <numeric>

#include "tessera/grammar/grammar.h"

namespace tessera::grammar {
namespace {

// Characters of `b` when it is plain JSON string text: bytes 0x20-0x7F other than '"' and '\',
// and complete UTF-8 sequences with the lead bytes the matcher accepts (C2-DF, E0-EF, F0-F4);
// -1 otherwise (empty, a quote, a backslash, a control byte, a broken or partial sequence).
int32_t plain_chars(const std::string& b) {
  if (b.empty()) return -1;
  int32_t chars = 0;
  for (size_t i = 0; i < b.size();) {
    const auto c = static_cast<uint8_t>(b[i]);
    size_t len = 0;
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3;
    else if (c >= 0xF0 && c <= 0xF4) len = 4;
    else return -1;
    if (i + len > b.size()) return -1;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<uint8_t>(b[i + k]);
      if (cc < 0x80 || cc > 0xBF) return -1;
    }
    i += len;
    ++chars;
  }
  return chars;
}

}  // namespace

void TokenVocabulary::insert(std::vector<TrieNode>& trie, const std::string& bytes, int32_t id) {
  int32_t node = 0;
  for (char ch : bytes) {
    const uint8_t b = static_cast<uint8_t>(ch);
    auto& kids = trie[static_cast<size_t>(node)].children;
    auto it = std::lower_bound(kids.begin(), kids.end(), b, [](const auto& e, uint8_t v) { return e.first < v; });
    if (it != kids.end() && it->first == b) {
      node = it->second;
    } else {
      const int32_t fresh = static_cast<int32_t>(trie.size());
      kids.insert(it, {b, fresh});  // may reallocate `kids`, not `trie`
      trie.emplace_back();
      node = fresh;
    }
  }
  if (node != 0) trie[static_cast<size_t>(node)].tokens.push_back(id);
}

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes)
    : size_(static_cast<int32_t>(token_bytes.size())), bytes_(token_bytes) {
  trie_.emplace_back();
  special_trie_.emplace_back();
  std::vector<std::pair<int32_t, int32_t>> plain;  // (chars, id)
  for (size_t id = 0; id < bytes_.size(); ++id) {
    const auto t = static_cast<int32_t>(id);
    insert(trie_, bytes_[id], t);
    const int32_t chars = plain_chars(bytes_[id]);
    if (chars > 0) plain.emplace_back(chars, t);
    else insert(special_trie_, bytes_[id], t);
  }
  std::sort(plain.begin(), plain.end());
  for (const auto& [chars, id] : plain) {
    plain_.push_back(id);
    plain_chars_.push_back(chars);
  }
}

void TokenVocabulary::walk(const std::vector<TrieNode>& trie, const Matcher& m, int32_t budget,
                           std::vector<int32_t>* out) const {
  struct Item {
    int32_t node;
    Matcher m;
  };
  std::vector<Item> stack;
  stack.push_back({0, m});
  while (!stack.empty()) {
    Item item = std::move(stack.back());
    stack.pop_back();
    for (const auto& [b, child] : trie[static_cast<size_t>(item.node)].children) {
      Matcher next = item.m;
      if (!next.feed(b)) continue;
      const TrieNode& cn = trie[static_cast<size_t>(child)];
      if (!cn.tokens.empty() && (budget <= 0 || next.min_remaining() <= budget - 1)) {
        out->insert(out->end(), cn.tokens.begin(), cn.tokens.end());
      }
      if (!cn.children.empty()) stack.push_back({child, std::move(next)});
    }
  }
}

void TokenVocabulary::allowed_tokens(const Matcher& m, int32_t budget, std::span<const int32_t> end_tokens,
                                     std::vector<int32_t>* out) const {
  out->clear();
  if (m.dead()) return;
  if (m.complete()) {
    for (int32_t e : end_tokens) {
      if (e >= 0 && e < size_) out->push_back(e);
    }
  }
  // Inside a string, a plain token of c characters keeps the string open and shortens its
  // shortest completion by min(c, short_by): with `need` = how far the text is over the budget,
  // the plain tokens allowed are those with need <= min(c, short_by) and c <= room — a range of
  // the character-sorted run. The other tokens walk their own (small) trie.
  const Matcher::StringRoom sr = m.free_string_room();
  if (sr.room >= 0) {
    const int32_t need = budget <= 0 ? 0 : std::max(0, m.min_remaining() - (budget - 1));
    if (need <= sr.short_by) {
      const auto lo = std::lower_bound(plain_chars_.begin(), plain_chars_.end(), std::max(need, 1));
      const auto hi = std::upper_bound(plain_chars_.begin(), plain_chars_.end(), sr.room);
      if (lo < hi) out->insert(out->end(), plain_.begin() + (lo - plain_chars_.begin()), plain_.begin() + (hi - plain_chars_.begin()));
    }
    walk(special_trie_, m, budget, out);
    return;
  }
  walk(trie_, m, budget, out);
}

}  // namespace tessera::grammar
