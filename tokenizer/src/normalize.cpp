#include "normalize.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

namespace tessera::tok {
namespace {

using json = nlohmann::json;

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

// One of the four Unicode normalization forms; the input unchanged when it is not valid UTF-8.
std::string unicode_form(std::string_view s, int options) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(s);
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

std::string lowercase(std::string_view s) {
  std::string r;
  r.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {  // not UTF-8: keep the byte
      r.push_back(static_cast<char>(*p));
      ++p;
      --left;
      continue;
    }
    utf8proc_uint8_t buf[4];
    const utf8proc_ssize_t m = utf8proc_encode_char(utf8proc_tolower(cp), buf);
    r.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(m));
    p += n;
    left -= n;
  }
  return r;
}

std::string replace_all(std::string_view s, const std::string& from, const std::string& to) {
  std::string r;
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    r.append(s.substr(pos, hit - pos));
    r.append(to);
    pos = hit + from.size();
  }
  r.append(s.substr(pos));
  return r;
}

}  // namespace

Result<Normalizer> Normalizer::parse(const std::string& path, const json& j) {
  Normalizer n;
  if (j.is_null()) return n;
  auto unsupported = [&](const std::string& what) {
    return make_error(ErrorCode::kUnsupported, path + ": tokenizer.json normalizer " + what + " is not supported "
                                                      "(supported: NFC, NFD, NFKC, NFKD, Lowercase, Replace with a String "
                                                      "pattern, Prepend, Sequence)");
  };
  if (!j.is_object() || !j.contains("type") || !j.at("type").is_string()) return unsupported("without a \"type\"");
  const std::string type = j.at("type").get<std::string>();
  json list = json::array({j});
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j.at("normalizers").is_array()) return unsupported("Sequence without \"normalizers\"");
    list = j.at("normalizers");
  }
  for (const json& s : list) {
    const std::string t = s.is_object() ? s.value("type", std::string()) : std::string();
    if (t == "NFC") {
      n.steps_.push_back({Kind::kNfc, "", ""});
    } else if (t == "NFD") {
      n.steps_.push_back({Kind::kNfd, "", ""});
    } else if (t == "NFKC") {
      n.steps_.push_back({Kind::kNfkc, "", ""});
    } else if (t == "NFKD") {
      n.steps_.push_back({Kind::kNfkd, "", ""});
    } else if (t == "Lowercase") {
      n.steps_.push_back({Kind::kLowercase, "", ""});
    } else if (t == "Replace") {
      const json pattern = s.value("pattern", json());
      if (!pattern.is_object() || !pattern.contains("String") || !pattern.at("String").is_string())
        return unsupported("Replace with a Regex pattern");
      const std::string from = pattern.at("String").get<std::string>();
      if (from.empty()) return unsupported("Replace with an empty pattern");
      n.steps_.push_back({Kind::kReplace, from, s.value("content", std::string())});
    } else if (t == "Prepend") {
      n.steps_.push_back({Kind::kPrepend, s.value("prepend", std::string()), ""});
    } else {
      return unsupported("'" + t + "'");
    }
  }
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::kNfc:
        if (!is_ascii(s)) s = unicode_form(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        break;
      case Kind::kNfd:
        if (!is_ascii(s)) s = unicode_form(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
        break;
      case Kind::kNfkc:
        if (!is_ascii(s)) s = unicode_form(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
        break;
      case Kind::kNfkd:
        if (!is_ascii(s)) s = unicode_form(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
        break;
      case Kind::kLowercase: s = lowercase(s); break;
      case Kind::kReplace: s = replace_all(s, st.from, st.to); break;
      case Kind::kPrepend:
        if (!s.empty()) s = st.from + s;
        break;
    }
  }
  return s;
}

}  // namespace tessera::tok
