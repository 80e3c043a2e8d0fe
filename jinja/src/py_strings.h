// Python str operations over UTF-8 (code points, Python's whitespace). Case mapping is ASCII.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::jinja::internal {

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);
std::string py_title(const std::string& s);        // str.title()
std::string jinja_title(const std::string& s);     // the `title` filter (words split on -, space, ( { [ <)
std::string py_capitalize(const std::string& s);   // str.capitalize()
std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right);
std::vector<std::string> py_split_lines(const std::string& s);
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
int64_t py_count(const std::string& s, const std::string& sub);
bool py_is(const std::string& s, const std::string& what);  // isdigit, isalpha, isspace, ...
std::string html_escape(const std::string& s);
std::string indent_lines(const std::string& s, const std::string& pad, bool first, bool blank);

}  // namespace tessera::jinja::internal
