#include "bpe.h"

#include <mutex>
#include <queue>
#include <unordered_map>

#include "utf8.h"

namespace tessera::tok {
namespace {

// GPT-2 bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 + n in byte order.
std::array<uint32_t, 256> make_byte_to_cp() {
  std::array<uint32_t, 256> t{};
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    t[b] = printable ? b : 0x100 + n++;
  }
  return t;
}
const std::array<uint32_t, 256>& byte_to_cp() {
  static const std::array<uint32_t, 256> table = make_byte_to_cp();
  return table;
}

// Decodes a byte-level spelled token to raw bytes; false if a character is not a stand-in.
bool byte_level_to_raw(std::string_view s, std::string& raw) {
  static const std::unordered_map<uint32_t, unsigned char> inverse = [] {
    std::unordered_map<uint32_t, unsigned char> m;
    for (uint32_t b = 0; b < 256; ++b) m.emplace(byte_to_cp()[b], static_cast<unsigned char>(b));
    return m;
  }();
  raw.clear();
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_char_len(s, i);
    const auto b0 = static_cast<unsigned char>(s[i]);
    uint32_t cp = 0;
    if (len == 1) {
      if (b0 >= 0x80) return false;
      cp = b0;
    } else {
      cp = b0 & (0xFF >> (len + 1));
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    auto it = inverse.find(cp);
    if (it == inverse.end()) return false;
    raw.push_back(static_cast<char>(it->second));
    i += len;
  }
  return true;
}

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

struct MergeResult {
  int32_t rank;
  int32_t id;
};

class ByteLevelBpe final : public TokenizerBase {
 public:
  ByteLevelBpe(ByteLevelBpeSpec spec, std::vector<std::string> raw, std::unordered_map<uint64_t, MergeResult> merges);
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override;

 private:
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  static constexpr size_t kCacheMaxWordBytes = 64;
  static constexpr size_t kCacheMaxEntries = 1 << 15;

  Normalizer normalizer_;
  PreTokenizer pre_;
  bool ignore_merges_;
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  std::unordered_map<uint64_t, MergeResult> merges_;  // (left id, right id) -> rank, result
  PieceMap raw_to_id_;                                // raw bytes of model tokens -> id
  std::array<int32_t, 256> byte_id_{};                // single-byte tokens

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;  // GUARDED_BY(cache_mu_)
};

ByteLevelBpe::ByteLevelBpe(ByteLevelBpeSpec spec, std::vector<std::string> raw,
                           std::unordered_map<uint64_t, MergeResult> merges)
    : normalizer_(std::move(spec.normalizer)),
      pre_(std::move(spec.pre)),
      ignore_merges_(spec.ignore_merges),
      prefix_ids_(std::move(spec.prefix_ids)),
      suffix_ids_(std::move(spec.suffix_ids)),
      merges_(std::move(merges)) {
  bos_ = spec.bos_id;
  eos_ = spec.eos_id;
  size_t n = raw.size();
  for (const BpeAddedToken& a : spec.added) n = std::max(n, static_cast<size_t>(a.token.id) + 1);
  bytes_ = std::move(raw);
  bytes_.resize(n);
  control_.assign(n, 0);
  byte_id_.fill(-1);
  for (size_t i = 0; i < spec.vocab.size(); ++i) {
    if (spec.vocab[i].empty()) continue;
    piece_to_id_.emplace(spec.vocab[i], static_cast<int32_t>(i));
    raw_to_id_.emplace(bytes_[i], static_cast<int32_t>(i));
    if (bytes_[i].size() == 1) {
      auto& slot = byte_id_[static_cast<unsigned char>(bytes_[i][0])];
      if (slot < 0) slot = static_cast<int32_t>(i);
    }
  }
  std::vector<AddedToken> literal;
  for (BpeAddedToken& a : spec.added) {
    const auto id = static_cast<size_t>(a.token.id);
    bytes_[id] = a.token.content;
    control_[id] = a.special ? 1 : 0;
    piece_to_id_.insert_or_assign(a.token.content, a.token.id);
    literal.push_back(std::move(a.token));
  }
  added_ = AddedTokenMatcher(std::move(literal));
}

std::vector<int32_t> ByteLevelBpe::encode(std::string_view text, bool add_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special) out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  std::vector<AddedTokenMatcher::Segment> segs;
  added_.split(text, segs);
  std::vector<std::string> words;
  for (const auto& seg : segs) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    words.clear();
    if (normalizer_.empty()) {
      words.emplace_back(seg.text);
    } else {
      words.push_back(normalizer_.apply(seg.text));
    }
    pre_.run(words);
    for (const std::string& w : words) encode_word(w, out);
  }
  if (add_special) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

void ByteLevelBpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = raw_to_id_.find(word);
    if (it != raw_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kCacheMaxWordBytes) {
    merge_word(word, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  merge_word(word, out);
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kCacheMaxEntries) cache_.clear();
  cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(start), out.end()));
}

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool alive;
};

struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t result;
};

struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);  // lowest rank, leftmost
  }
};

void ByteLevelBpe::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  for (char c : word) {
    const int32_t id = byte_id_[static_cast<unsigned char>(c)];
    if (id < 0) continue;  // a byte the vocabulary cannot spell (never for a full byte-level vocab)
    const auto idx = static_cast<int32_t>(syms.size());
    syms.push_back({id, idx - 1, idx + 1, true});
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const int32_t lid = syms[static_cast<size_t>(l)].id, rid = syms[static_cast<size_t>(r)].id;
    auto it = merges_.find(pair_key(lid, rid));
    if (it != merges_.end()) queue.push({it->second.rank, l, r, lid, rid, it->second.id});
  };
  for (size_t i = 1; i < syms.size(); ++i) try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = syms[static_cast<size_t>(c.left)];
    Symbol& r = syms[static_cast<size_t>(c.right)];
    if (!l.alive || !r.alive || l.next != c.right || l.id != c.left_id || r.id != c.right_id) continue;  // stale
    l.id = c.result;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.left;
    try_add(l.prev, c.left);
    try_add(c.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) out.push_back(syms[static_cast<size_t>(i)].id);
}

}  // namespace

std::string byte_to_unicode(unsigned char b) {
  std::string s;
  append_utf8(byte_to_cp()[b], s);
  return s;
}

Result<std::unique_ptr<Tokenizer>> make_byte_level_bpe(ByteLevelBpeSpec spec) {
  const std::string& src = spec.source;
  if (spec.vocab.empty()) return make_error(ErrorCode::kCorruptFile, src + ": BPE vocabulary is empty");
  if (spec.pre.empty() || spec.pre.back().kind != PreTokenizerStep::Kind::kByteLevel) {
    return make_error(ErrorCode::kUnsupported, src + ": not implemented yet: BPE without a final ByteLevel pre-tokenizer");
  }
  for (size_t i = 0; i + 1 < spec.pre.size(); ++i) {
    if (spec.pre[i].kind == PreTokenizerStep::Kind::kByteLevel) {
      return make_error(ErrorCode::kUnsupported, src + ": not implemented yet: a ByteLevel pre-tokenizer before other steps");
    }
  }
  PieceMap spelled;
  std::vector<std::string> raw(spec.vocab.size());
  for (size_t i = 0; i < spec.vocab.size(); ++i) {
    const std::string& t = spec.vocab[i];
    if (t.empty()) continue;
    spelled.emplace(t, static_cast<int32_t>(i));
    if (!byte_level_to_raw(t, raw[i])) raw[i] = t;  // not byte-level spelled (e.g. "<|endoftext|>")
  }
  std::unordered_map<uint64_t, MergeResult> merges;
  merges.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [a, b] = spec.merges[rank];
    const auto ia = spelled.find(a), ib = spelled.find(b), iab = spelled.find(a + b);
    const char* missing = ia == spelled.end() ? "left part" : ib == spelled.end() ? "right part" : iab == spelled.end() ? "result" : nullptr;
    if (missing != nullptr) {
      return make_error(ErrorCode::kCorruptFile, src + ": merge " + std::to_string(rank) + " '" + a + " " + b + "': " +
                                                     missing + " is not in the vocabulary");
    }
    merges.try_emplace(pair_key(ia->second, ib->second), MergeResult{static_cast<int32_t>(rank), iab->second});
  }
  int64_t n = static_cast<int64_t>(spec.vocab.size());
  for (const BpeAddedToken& a : spec.added) {
    if (a.token.id < 0 || a.token.id > (1 << 24)) {
      return make_error(ErrorCode::kCorruptFile, src + ": added token '" + a.token.content + "' has id " + std::to_string(a.token.id));
    }
    n = std::max<int64_t>(n, a.token.id + 1);
  }
  std::vector<int32_t> specials = spec.prefix_ids;
  specials.insert(specials.end(), spec.suffix_ids.begin(), spec.suffix_ids.end());
  for (int32_t id : specials) {
    if (id < 0 || id >= n) return make_error(ErrorCode::kCorruptFile, src + ": post-processor token id " + std::to_string(id) + " outside the vocabulary");
  }
  for (int32_t* id : {&spec.bos_id, &spec.eos_id}) {
    if (*id >= n) return make_error(ErrorCode::kCorruptFile, src + ": BOS/EOS id " + std::to_string(*id) + " outside the vocabulary");
    if (*id < 0) *id = -1;
  }
  return std::unique_ptr<Tokenizer>(new ByteLevelBpe(std::move(spec), std::move(raw), std::move(merges)));
}

}  // namespace tessera::tok
