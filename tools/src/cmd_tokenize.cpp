// `tessera tokenize`: encode text or decode ids with any supported tokenizer (debugging aid).
//
//   tessera tokenize --tokenizer PATH --text "Once upon a time" [--no-special]
//   tessera tokenize --tokenizer PATH --decode 1,403,407
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/tools/command.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tessera/tools/tokenizer_open.h"

namespace tessera::tools {
namespace {

struct Args {
  std::string tokenizer;
  std::string text;
  std::string decode;
  bool no_special = false;
};

void declare_options(config::Options& o, Args& a) {
  o.add(a.tokenizer, {.name = "tokenizer",
                      .help = "llama2.c tokenizer.bin, tokenizer.json (or its directory), or a .gguf file (required)"});
  o.add(a.text, {.name = "text", .help = "print the ids, one per line with the piece bytes they stand for"});
  o.add(a.decode, {.name = "decode", .help = "comma-separated ids: print the decoded text"});
  o.add(a.no_special, {.name = "no-special", .help = "do not add BOS / post-processor tokens when encoding"});
}

// True when `s` is well-formed UTF-8 (enough for display purposes; no overlong checks).
bool looks_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// Printable form of a token's bytes: C escapes for control bytes, and for every byte >= 0x80
// when the token is not whole UTF-8 characters (a byte-fallback token, half a character).
std::string escape(const std::string& bytes) {
  const bool utf8 = looks_utf8(bytes);
  std::string out;
  for (unsigned char c : bytes) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && !utf8)) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

bool parse_ids(const std::string& s, std::vector<int32_t>& ids) {
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    const std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end == nullptr || *end != '\0' || v < INT32_MIN || v > INT32_MAX) return false;
    ids.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return true;
}

int run_tokenize(const std::vector<std::string>& args) {
  Args a;
  config::Options o("tessera tokenize", "tokenize");
  declare_options(o, a);
  o.describe("Encode text or decode ids with any supported tokenizer (debugging aid); give --tokenizer and exactly "
             "one of --text and --decode");
  if (auto exit_code = config::parse_command_line(o, args)) return *exit_code;
  const bool have_text = o.source("text") != "default", have_decode = o.source("decode") != "default";
  if (a.tokenizer.empty() || have_text == have_decode) {
    std::fprintf(stderr, "tessera tokenize: give --tokenizer and one of --text or --decode; see tessera tokenize --help\n");
    return 2;
  }
  const std::string& path = a.tokenizer;
  const std::string& text = a.text;
  const std::string& decode = a.decode;
  const bool special = !a.no_special;
  auto tok = tools::open_any_tokenizer(path);
  if (!tok.ok()) {
    std::fprintf(stderr, "tessera tokenize: %s\n", tok.error().to_string().c_str());
    return 1;
  }
  const Tokenizer& t = **tok;
  if (have_decode) {
    std::vector<int32_t> ids;
    if (!parse_ids(decode, ids)) {
      std::fprintf(stderr, "tessera tokenize: --decode wants comma-separated integer ids, got '%s'\n", decode.c_str());
      return 2;
    }
    std::printf("%s\n", t.decode(ids).c_str());
    return 0;
  }
  const std::vector<int32_t> ids = t.encode(text, special);
  std::printf("%zu tokens (vocab %d, bos %d, eos %d)\n", ids.size(), t.vocab_size(), t.bos_id(), t.eos_id());
  for (int32_t id : ids) {
    std::printf("%8d  '%s'%s\n", id, escape(t.token_bytes(id)).c_str(), t.is_control(id) ? "  (control)" : "");
  }
  std::string csv;
  for (size_t i = 0; i < ids.size(); ++i) csv += (i ? "," : "") + std::to_string(ids[i]);
  std::printf("ids: %s\n", csv.c_str());
  return 0;
}

}  // namespace

TESSERA_COMMAND("tokenize", "encode text or decode ids with a tokenizer (debugging)", run_tokenize);

}  // namespace tessera::tools
