#include "py_strings.h"

#include <algorithm>

#include "tessera/jinja/value.h"

namespace tessera::jinja::internal {
namespace {

bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_alpha(char c) { return is_upper(c) || is_lower(c); }
char to_upper(char c) { return is_lower(c) ? static_cast<char>(c - 32) : c; }
char to_lower(char c) { return is_upper(c) ? static_cast<char>(c + 32) : c; }

}  // namespace

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  auto cps = utf8_decode(s);
  std::vector<uint32_t> set;
  if (chars) set = utf8_decode(*chars);
  auto strip = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cps[e - 1])) --e;
  }
  return utf8_encode(cps, b, e);
}

std::string ascii_upper(std::string s) {
  for (char& c : s) c = to_upper(c);
  return s;
}

std::string ascii_lower(std::string s) {
  for (char& c : s) c = to_lower(c);
  return s;
}

std::string py_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    if (is_alpha(c)) {
      c = prev_cased ? to_lower(c) : to_upper(c);
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

std::string jinja_title(const std::string& s) {
  std::string out = s;
  bool word_start = true;
  for (char& c : out) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' || c == '\t' || c == '\n' ||
               c == '\r' || c == '\v' || c == '\f';
    if (sep) {
      word_start = true;
      continue;
    }
    c = word_start ? to_upper(c) : to_lower(c);
    word_start = false;
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = to_upper(out[0]);
  return out;
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> out;
  if (!sep) {
    auto cps = utf8_decode(s);
    if (from_right) {
      std::reverse(cps.begin(), cps.end());
    }
    size_t i = 0, n = cps.size();
    while (true) {
      while (i < n && is_py_space(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = n;
        while (e > i && is_py_space(cps[e - 1])) --e;
        std::vector<uint32_t> rest(cps.begin() + static_cast<long>(i), cps.begin() + static_cast<long>(e));
        if (from_right) std::reverse(rest.begin(), rest.end());
        out.push_back(utf8_encode(rest));
        break;
      }
      size_t j = i;
      while (j < n && !is_py_space(cps[j])) ++j;
      std::vector<uint32_t> word(cps.begin() + static_cast<long>(i), cps.begin() + static_cast<long>(j));
      if (from_right) std::reverse(word.begin(), word.end());
      out.push_back(utf8_encode(word));
      i = j;
    }
    if (from_right) std::reverse(out.begin(), out.end());
    return out;
  }
  const std::string& d = *sep;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t p = s.find(d, start);
      if (p == std::string::npos) break;
      out.push_back(s.substr(start, p - start));
      start = p + d.size();
    }
    out.push_back(s.substr(start));
    return out;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < d.size()) break;
    size_t p = s.rfind(d, end - d.size());
    if (p == std::string::npos) break;
    out.push_back(s.substr(p + d.size(), end - p - d.size()));
    end = p;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      out.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    auto cps = utf8_decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) out += utf8_encode(cps, i, i + 1);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t p = s.find(from, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += to;
    start = p + from.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

int64_t py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_decode(s).size()) + 1;
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

bool py_is(const std::string& s, const std::string& what) {
  if (s.empty()) return false;
  if (what == "isspace") {
    for (uint32_t c : utf8_decode(s)) {
      if (!is_py_space(c)) return false;
    }
    return true;
  }
  bool any_cased = false;
  for (char c : s) {
    bool digit = c >= '0' && c <= '9';
    if (what == "isdigit" && !digit) return false;
    if (what == "isalpha" && !is_alpha(c)) return false;
    if (what == "isalnum" && !is_alpha(c) && !digit) return false;
    if (what == "islower" && is_upper(c)) return false;
    if (what == "isupper" && is_lower(c)) return false;
    any_cased = any_cased || is_alpha(c);
  }
  return (what == "islower" || what == "isupper") ? any_cased : true;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string indent_lines(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::string text = s;
  std::string out;
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\n') {
      lines.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    bool indent = i == 0 ? first : (blank || !lines[i].empty());
    if (indent) out += pad;
    out += lines[i];
  }
  return out;
}

}  // namespace tessera::jinja::internal
