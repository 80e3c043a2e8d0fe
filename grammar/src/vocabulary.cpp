// TokenVocabulary: a byte trie of the vocabulary, walked depth-first with a Matcher so that a
// prefix the grammar rejects prunes every token that starts with it.
#include <algorithm>

#include "tessera/grammar/grammar.h"

namespace tessera::grammar {

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes)
    : size_(static_cast<int32_t>(token_bytes.size())), bytes_(token_bytes) {
  trie_.emplace_back();
  for (size_t id = 0; id < bytes_.size(); ++id) {
    int32_t node = 0;
    for (char ch : bytes_[id]) {
      const uint8_t b = static_cast<uint8_t>(ch);
      auto& kids = trie_[static_cast<size_t>(node)].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), b, [](const auto& e, uint8_t v) { return e.first < v; });
      if (it != kids.end() && it->first == b) {
        node = it->second;
      } else {
        const int32_t fresh = static_cast<int32_t>(trie_.size());
        kids.insert(it, {b, fresh});  // may reallocate `kids`, not trie_
        trie_.emplace_back();
        node = fresh;
      }
    }
    if (node != 0) trie_[static_cast<size_t>(node)].tokens.push_back(static_cast<int32_t>(id));
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
  struct Item {
    int32_t node;
    Matcher m;
  };
  std::vector<Item> stack;
  stack.push_back({0, m});
  while (!stack.empty()) {
    Item item = std::move(stack.back());
    stack.pop_back();
    for (const auto& [b, child] : trie_[static_cast<size_t>(item.node)].children) {
      Matcher next = item.m;
      if (!next.feed(b)) continue;
      const TrieNode& cn = trie_[static_cast<size_t>(child)];
      if (!cn.tokens.empty() && (budget <= 0 || next.min_remaining() <= budget - 1)) {
        out->insert(out->end(), cn.tokens.begin(), cn.tokens.end());
      }
      if (!cn.children.empty()) stack.push_back({child, std::move(next)});
    }
  }
}

}  // namespace tessera::grammar
