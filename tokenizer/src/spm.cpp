#include "spm.h"

#include <cstdio>
#include <cstring>
#include <queue>

#include "base.h"
#include "utf8.h"

namespace tessera::tok {
namespace {

constexpr std::string_view kUnknownText = " \xE2\x81\x87 ";  // SentencePiece renders <unk> as " ⁇ "

// Parses "<0xXX>" (upper- or lowercase hex); returns -1 otherwise.
int parse_byte_piece(std::string_view p) {
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(p[3]), lo = hex(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class SpmTokenizer final : public TokenizerBase {
 public:
  explicit SpmTokenizer(SpmVocab v);
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override;

 private:
  void encode_run(std::string_view text, bool prefix, std::vector<int32_t>& out) const;
  void emit_symbol(std::string_view sym, std::vector<int32_t>& out) const;

  SpmVocab v_;
  PieceMap mergeable_;  // normal pieces only: the results a merge may produce
  std::array<int32_t, 256> byte_id_{};
};

SpmTokenizer::SpmTokenizer(SpmVocab v) : v_(std::move(v)) {
  const size_t n = v_.pieces.size();
  bos_ = v_.bos_id;
  eos_ = v_.eos_id;
  strip_first_space_ = v_.add_space_prefix;
  bytes_.resize(n);
  control_.assign(n, 0);
  byte_id_.fill(-1);
  auto spaced = [this](const std::string& p) {  // the piece with its space symbol as ' '
    if (v_.space == " ") return p;
    std::string b;
    for (size_t k = 0; k < p.size();) {
      if (p.compare(k, v_.space.size(), v_.space) == 0) {
        b.push_back(' ');
        k += v_.space.size();
      } else {
        b.push_back(p[k++]);
      }
    }
    return b;
  };
  for (size_t i = 0; i < n; ++i) {
    const std::string& p = v_.pieces[i];
    const auto id = static_cast<int32_t>(i);
    piece_to_id_.emplace(p, id);  // first occurrence wins for duplicates
    switch (v_.kinds[i]) {
      case PieceKind::kNormal:
        mergeable_.emplace(p, id);
        bytes_[i] = spaced(p);
        break;
      case PieceKind::kByte: {
        const int byte = parse_byte_piece(p);
        if (byte >= 0) {
          bytes_[i] = std::string(1, static_cast<char>(byte));
          if (byte_id_[static_cast<size_t>(byte)] < 0) byte_id_[static_cast<size_t>(byte)] = id;
        }
        break;
      }
      case PieceKind::kUnknown:
        bytes_[i] = std::string(kUnknownText);
        break;
      case PieceKind::kUserDefined:
        if (v_.merge_user_defined) mergeable_.emplace(p, id);
        bytes_[i] = spaced(p);
        break;
      case PieceKind::kControl:
        control_[i] = 1;
        break;
      case PieceKind::kUnused:
        break;
    }
  }
  added_ = AddedTokenMatcher(std::move(v_.literal), v_.strip_spaces);
  v_.literal.clear();
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && v_.add_bos && bos_ >= 0) out.push_back(bos_);
  std::vector<AddedTokenMatcher::Segment> segs;
  if (added_.empty()) {
    if (!text.empty()) segs.push_back({text, -1});
  } else {
    added_.split(text, segs);
  }
  // Every text run starts the text or follows a literal token; like llama.cpp, each gets the
  // dummy-prefix space.
  for (const auto& s : segs) {
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      encode_run(s.text, v_.add_space_prefix && (!v_.prefix_first_run_only || s.text.data() == text.data()), out);
    }
  }
  return out;
}

// A symbol of the linked list: a byte range of the normalized text.
struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t off;
  uint32_t len;  // 0 once merged into its left neighbour
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t size;  // len(left) + len(right) when pushed: detects stale entries
};

struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);  // best score, leftmost
  }
};

void SpmTokenizer::encode_run(std::string_view text, bool prefix, std::vector<int32_t>& out) const {
  std::string norm;
  norm.reserve(text.size() + 8);
  if (prefix && !(v_.prefix_unless_spaced && (text.starts_with(' ') || text.starts_with(v_.space)))) norm += v_.space;
  if (v_.space == " ") {
    norm += text;
  } else {
    for (char c : text) {
      if (c == ' ') {
        norm += v_.space;
      } else {
        norm.push_back(c);
      }
    }
  }
  std::vector<Symbol> syms;
  syms.reserve(norm.size());
  for (size_t i = 0; i < norm.size();) {
    const size_t len = utf8_char_len(norm, i);
    const auto idx = static_cast<int32_t>(syms.size());
    syms.push_back({idx - 1, idx + 1, static_cast<uint32_t>(i), static_cast<uint32_t>(len)});
    i += len;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = syms[static_cast<size_t>(left)];
    const Symbol& r = syms[static_cast<size_t>(right)];
    const std::string_view merged(norm.data() + l.off, l.len + r.len);
    auto it = mergeable_.find(merged);
    if (it == mergeable_.end()) return;
    queue.push({v_.scores[static_cast<size_t>(it->second)], left, right, l.len + r.len});
  };
  for (size_t i = 1; i < syms.size(); ++i) try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = syms[static_cast<size_t>(b.left)];
    Symbol& r = syms[static_cast<size_t>(b.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const Symbol& s = syms[static_cast<size_t>(i)];
    emit_symbol(std::string_view(norm.data() + s.off, s.len), out);
  }
}

void SpmTokenizer::emit_symbol(std::string_view sym, std::vector<int32_t>& out) const {
  auto it = mergeable_.find(sym);
  if (it != mergeable_.end()) {
    out.push_back(it->second);
    return;
  }
  // Merges only ever produce normal pieces, so this is one character without a piece.
  for (char c : sym) {
    const int32_t id = byte_id_[static_cast<unsigned char>(c)];
    if (id >= 0) {
      out.push_back(id);
    } else if (v_.unk_id >= 0) {
      out.push_back(v_.unk_id);
    }
  }
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(SpmVocab v) {
  const size_t n = v.pieces.size();
  if (n == 0) return make_error(ErrorCode::kCorruptFile, v.source + ": vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return make_error(ErrorCode::kCorruptFile, v.source + ": vocabulary too large");
  if (v.scores.empty()) v.scores.assign(n, 0.0f);
  if (v.scores.size() != n) {
    return make_error(ErrorCode::kCorruptFile, v.source + ": " + std::to_string(v.scores.size()) +
                                                   " scores for " + std::to_string(n) + " tokens");
  }
  if (v.kinds.size() != n) {
    return make_error(ErrorCode::kCorruptFile, v.source + ": " + std::to_string(v.kinds.size()) +
                                                   " token types for " + std::to_string(n) + " tokens");
  }
  for (int32_t* id : {&v.bos_id, &v.eos_id, &v.unk_id}) {
    if (*id >= static_cast<int64_t>(n)) {
      return make_error(ErrorCode::kCorruptFile, v.source + ": special token id " + std::to_string(*id) +
                                                     " outside the vocabulary of " + std::to_string(n));
    }
    if (*id < 0) *id = -1;
  }
  if (v.space.empty()) return make_error(ErrorCode::kInvalidArgument, v.source + ": empty space symbol");
  for (const AddedToken& t : v.literal) {
    if (t.id < 0 || static_cast<size_t>(t.id) >= n) {
      return make_error(ErrorCode::kCorruptFile, v.source + ": literal token '" + t.content + "' has id " +
                                                     std::to_string(t.id) + " outside the vocabulary of " + std::to_string(n));
    }
  }
  return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(v)));
}

Result<std::unique_ptr<Tokenizer>> load_llama2c_tokenizer(const std::string& path) {
  TS_ASSIGN_OR_RETURN(const std::string data, read_whole_file(path, "llama2.c tokenizer.bin"));
  if (data.size() < 4) {
    return make_error(ErrorCode::kTruncatedFile, path + ": llama2.c tokenizer.bin truncated: no max_token_length header");
  }
  int32_t max_len = 0;
  std::memcpy(&max_len, data.data(), 4);
  if (max_len <= 0 || max_len > (1 << 20)) {
    return make_error(ErrorCode::kCorruptFile,
                      path + ": not a llama2.c tokenizer.bin: max_token_length " + std::to_string(max_len));
  }
  SpmVocab v;
  v.source = path;
  size_t off = 4;
  while (off < data.size()) {
    const size_t index = v.pieces.size();
    if (data.size() - off < 8) {
      return make_error(ErrorCode::kTruncatedFile, path + ": truncated in the header of token " + std::to_string(index) +
                                                       " at byte " + std::to_string(off));
    }
    float score = 0;
    int32_t len = 0;
    std::memcpy(&score, data.data() + off, 4);
    std::memcpy(&len, data.data() + off + 4, 4);
    off += 8;
    if (len < 0 || len > max_len) {
      return make_error(ErrorCode::kCorruptFile, path + ": token " + std::to_string(index) + " has length " +
                                                     std::to_string(len) + " (max_token_length " +
                                                     std::to_string(max_len) + ")");
    }
    if (data.size() - off < static_cast<size_t>(len)) {
      return make_error(ErrorCode::kTruncatedFile, path + ": truncated in the text of token " + std::to_string(index) +
                                                       " (needs " + std::to_string(len) + " bytes, " +
                                                       std::to_string(data.size() - off) + " left)");
    }
    v.pieces.emplace_back(data.data() + off, static_cast<size_t>(len));
    v.scores.push_back(score);
    off += static_cast<size_t>(len);
  }
  if (v.pieces.size() < 3) {
    return make_error(ErrorCode::kCorruptFile, path + ": only " + std::to_string(v.pieces.size()) +
                                                   " tokens; llama2.c vocabularies start with <unk>, BOS, EOS");
  }
  // llama2.c conventions: 0 = <unk>, 1 = BOS, 2 = EOS; "<0xXX>" pieces are bytes.
  v.kinds.assign(v.pieces.size(), PieceKind::kNormal);
  v.kinds[0] = PieceKind::kUnknown;
  v.kinds[1] = PieceKind::kControl;
  v.kinds[2] = PieceKind::kControl;
  for (size_t i = 3; i < v.pieces.size(); ++i) {
    if (parse_byte_piece(v.pieces[i]) >= 0) v.kinds[i] = PieceKind::kByte;
  }
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.space = " ";
  return make_spm_tokenizer(std::move(v));
}

}  // namespace tessera::tok
