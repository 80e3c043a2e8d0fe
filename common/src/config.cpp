#include "tessera/common/config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tessera/common/log.h"
#include "tessera/common/version.h"

namespace tessera::config {
namespace {

std::string normalize(std::string_view key) {
  std::string k(key);
  for (char& c : k) c = (c == '_') ? '-' : c;
  return k;
}

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

const char* type_name(Type t) {
  switch (t) {
    case Type::kString: return "string";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kBool: return "bool";
  }
  return "?";
}

std::string fmt_bound(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e18) return std::to_string(static_cast<long long>(v));
  std::ostringstream os;
  os << v;
  return os.str();
}

// Breaks `text` into lines of at most `width` characters at spaces.
std::string wrap(const std::string& text, size_t width) {
  std::string out, line;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    if (!line.empty() && line.size() + 1 + w.size() > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  return out + line;
}

std::string sentence(const std::string& s) {
  if (s.empty() || s.back() == '.') return s;
  return s + ".";
}

// Checks `value` against the option; returns the canonical form.
Result<std::string> check_value(const Option& o, double type_min, double type_max, std::string_view value,
                                std::string_view source) {
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::kInvalidArgument, "option --" + o.name + " (from " + std::string(source) + "): " + why +
                                                       " (got '" + std::string(value) + "')");
  };
  std::string v(value);
  switch (o.type) {
    case Type::kString:
      if (!o.choices.empty()) {
        for (const auto& c : o.choices)
          if (c == v) return v;
        std::string all;
        for (const auto& c : o.choices) all += (all.empty() ? "" : "|") + c;
        return bad("must be one of " + all);
      }
      return v;
    case Type::kBool:
      if (v == "true" || v == "1" || v == "yes" || v == "on") return std::string("true");
      if (v == "false" || v == "0" || v == "no" || v == "off") return std::string("false");
      return bad("must be true or false");
    case Type::kInt: {
      if (v.empty()) return bad("must be an integer");
      errno = 0;
      char* end = nullptr;
      long long x = std::strtoll(v.c_str(), &end, 10);
      if (errno != 0 || end == nullptr || *end != '\0') return bad("must be an integer");
      if (static_cast<double>(x) < o.min || static_cast<double>(x) > o.max)
        return bad("must be in [" + fmt_bound(o.min) + ", " + fmt_bound(o.max) + "]");
      if (static_cast<double>(x) < type_min || static_cast<double>(x) > type_max)
        return bad("must be in [" + fmt_bound(std::max(o.min, type_min)) + ", " + fmt_bound(std::min(o.max, type_max)) + "]");
      return std::to_string(x);
    }
    case Type::kFloat: {
      if (v.empty()) return bad("must be a number");
      errno = 0;
      char* end = nullptr;
      double x = std::strtod(v.c_str(), &end);
      if (errno != 0 || end == nullptr || *end != '\0' || !std::isfinite(x)) return bad("must be a number");
      if (x < o.min || x > o.max) return bad("must be in [" + fmt_bound(o.min) + ", " + fmt_bound(o.max) + "]");
      return v;
    }
  }
  return bad("unknown type");
}

}  // namespace

namespace detail {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    item = trim(item);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string join_list(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ",") + x;
  return out;
}

}  // namespace detail

std::string format_double(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

Options::Options(std::string program, std::string section) : program_(std::move(program)), section_(std::move(section)) {
  add(common_.log_level, {.name = "log-level", .help = "log level", .env = "TESSERA_LOG_LEVEL",
                          .choices = {"debug", "info", "warn", "error", "off"}});
  entries_.back().common = true;
  add(common_.log_format, {.name = "log-format", .help = "log line format: text, or json (one object a line; docs/operations.md)",
                           .env = "TESSERA_LOG_FORMAT", .choices = {"text", "json"}});
  entries_.back().common = true;
}

Options& Options::add_entry(Option option, std::string current, Store store, double type_min, double type_max) {
  option.name = normalize(option.name);
  for (const auto& e : entries_) TS_CHECK(e.option.name != option.name) << "option --" << option.name << " declared twice";
  for (const char* builtin : {"config", "help", "help-markdown", "version"})
    TS_CHECK(option.name != builtin) << "--" << option.name << " is built in";
  auto v = check_value(option, type_min, type_max, current, "default");
  TS_CHECK(v.ok()) << v.error().to_string();
  std::string value = *v;
  entries_.push_back(Entry{.option = std::move(option), .default_value = value, .value = value, .source = "default",
                           .store = std::move(store), .type_min = type_min, .type_max = type_max});
  return *this;
}

Options& Options::add(Option option, std::string current, Store store) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  return add_entry(std::move(option), std::move(current), std::move(store), -kInf, kInf);
}

Options& Options::positional(std::string_view name) {
  TS_CHECK(positional_.empty()) << "a second positional argument (--" << name << ")";
  positional_ = entry(name).option.name;
  return *this;
}

Options& Options::describe(std::string summary) {
  summary_ = std::move(summary);
  return *this;
}

Options::Entry& Options::entry(std::string_view name) {
  std::string n = normalize(name);
  for (auto& e : entries_)
    if (e.option.name == n) return e;
  TS_CHECK(false) << "option --" << n << " was never declared";
  return entries_.front();
}

const Options::Entry& Options::entry(std::string_view name) const {
  return const_cast<Options*>(this)->entry(name);
}

bool Options::has(std::string_view name) const {
  const std::string n = normalize(name);
  for (const auto& e : entries_)
    if (e.option.name == n) return true;
  return false;
}

const Option& Options::option(std::string_view name) const { return entry(name).option; }

std::vector<std::string> Options::names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.option.name);
  return out;
}

Status Options::set(std::string_view name, std::string_view value, std::string_view source) {
  std::string n = normalize(name);
  for (auto& e : entries_) {
    if (e.option.name != n) continue;
    TS_ASSIGN_OR_RETURN(e.value, check_value(e.option, e.type_min, e.type_max, value, source));
    e.source = std::string(source);
    if (e.store) e.store(e.value);
    return ok_status();
  }
  return make_error(ErrorCode::kInvalidArgument, "unknown option '" + n + "' (from " + std::string(source) + "); see " +
                                                     program_ + " --help");
}

Status Options::load_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::kIoError, "cannot open config file " + path);
  std::string line;
  int lineno = 0;
  bool applies = true;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string where = path + ":" + std::to_string(lineno);
    size_t hash = line.find('#');
    std::string t = trim(hash == std::string::npos ? line : std::string_view(line).substr(0, hash));
    if (t.empty()) continue;
    if (t.front() == '[') {
      if (t.back() != ']') return make_error(ErrorCode::kInvalidArgument, where + ": bad section header '" + t + "'");
      std::string sec = trim(std::string_view(t).substr(1, t.size() - 2));
      applies = sec == section_;
      continue;
    }
    size_t eq = t.find('=');
    if (eq == std::string::npos) return make_error(ErrorCode::kInvalidArgument, where + ": expected 'key = value' (got '" + t + "')");
    if (!applies) continue;
    std::string key = trim(std::string_view(t).substr(0, eq));
    std::string value = trim(std::string_view(t).substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    TS_TRY(set(key, value, where));
  }
  return ok_status();
}

Status Options::parse(const std::vector<std::string>& args) {
  // Pass 1: flags into a list (and find --config and the built-in requests).
  std::vector<std::pair<std::string, std::string>> flags;
  bool positional_seen = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      help_requested_ = true;
      continue;
    }
    if (a == "--help-markdown") {
      help_markdown_requested_ = true;
      continue;
    }
    if (a == "--version") {
      version_requested_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      if (positional_.empty() || positional_seen)
        return make_error(ErrorCode::kInvalidArgument, "unexpected argument '" + a + "'; see " + program_ + " --help");
      positional_seen = true;
      flags.emplace_back(positional_, a);
      continue;
    }
    std::string name = a.substr(2), value;
    size_t eq = name.find('=');
    bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    name = normalize(name);
    if (name == "config") {
      if (!has_value) {
        if (i + 1 >= args.size()) return make_error(ErrorCode::kInvalidArgument, "--config needs a file");
        value = args[++i];
      }
      config_file_ = value;
      continue;
    }
    const Entry* e = nullptr;
    for (const auto& x : entries_)
      if (x.option.name == name) e = &x;
    if (e == nullptr) return make_error(ErrorCode::kInvalidArgument, "unknown option --" + name + "; see " + program_ + " --help");
    if (!has_value) {
      // A bare boolean flag takes the next argument only when it reads as a boolean.
      const bool next_is_bool = i + 1 < args.size() && check_value(e->option, 0, 0, args[i + 1], "").ok();
      if (e->option.type == Type::kBool && !next_is_bool) {
        value = "true";
      } else {
        if (i + 1 >= args.size()) return make_error(ErrorCode::kInvalidArgument, "--" + name + " needs a value");
        value = args[++i];
      }
    }
    flags.emplace_back(name, value);
  }
  if (help_requested_ || help_markdown_requested_ || version_requested_) return ok_status();
  if (config_file_.empty()) {
    if (const char* env = std::getenv("TESSERA_CONFIG")) config_file_ = env;
  }
  if (!config_file_.empty()) TS_TRY(load_file(config_file_));
  for (auto& e : entries_) {
    if (e.option.env.empty()) continue;
    if (const char* v = std::getenv(e.option.env.c_str())) TS_TRY(set(e.option.name, v, "env " + e.option.env));
  }
  for (const auto& [name, value] : flags) TS_TRY(set(name, value, "flag"));
  return ok_status();
}

std::string Options::get(std::string_view name) const { return entry(name).value; }

int64_t Options::get_int(std::string_view name) const {
  const Entry& e = entry(name);
  TS_CHECK(e.option.type == Type::kInt) << "--" << e.option.name << " is not an int";
  return std::strtoll(e.value.c_str(), nullptr, 10);
}

double Options::get_float(std::string_view name) const {
  const Entry& e = entry(name);
  TS_CHECK(e.option.type == Type::kFloat || e.option.type == Type::kInt) << "--" << e.option.name << " is not a number";
  return std::strtod(e.value.c_str(), nullptr);
}

bool Options::get_bool(std::string_view name) const {
  const Entry& e = entry(name);
  TS_CHECK(e.option.type == Type::kBool) << "--" << e.option.name << " is not a bool";
  return e.value == "true";
}

std::string Options::source(std::string_view name) const { return entry(name).source; }

std::string Options::help() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [--config FILE] [options]" << (positional_.empty() ? "" : " [" + positional_ + "]")
     << "\n";
  if (!summary_.empty()) os << "\n" << wrap(sentence(summary_), 100) << "\n";
  os << "\nOptions (precedence: flag > environment > config file [" << section_ << "] > default):\n";
  auto print = [&](const Entry& e) {
    const Option& o = e.option;
    os << "  --" << o.name << " <" << type_name(o.type) << ">" << (o.name == positional_ ? "  (or positional)" : "")
       << "\n      " << o.help << "\n      default: " << (e.default_value.empty() ? "\"\"" : e.default_value);
    if (!o.env.empty()) os << "   env: " << o.env;
    if (std::isfinite(o.min) || std::isfinite(o.max)) os << "   range: [" << fmt_bound(o.min) << ", " << fmt_bound(o.max) << "]";
    if (!o.choices.empty()) {
      os << "   one of:";
      for (const auto& c : o.choices) os << " " << c;
    }
    os << "\n";
  };
  for (const auto& e : entries_)
    if (!e.common) print(e);
  os << "\nCommon options:\n";
  for (const auto& e : entries_)
    if (e.common) print(e);
  os << "  --config FILE\n      key = value file; keys are option names, [" << section_
     << "] section applies (env: TESSERA_CONFIG)\n"
     << "  --help, --help-markdown, --version\n      this text; the options as a Markdown table; the version\n";
  return os.str();
}

std::string Options::markdown_table() const {
  std::ostringstream os;
  os << "| flag / config key | type | default | env | description |\n|---|---|---|---|---|\n";
  auto row = [&](const Entry& e) {
    const Option& o = e.option;
    os << "| `--" << o.name << "` | " << type_name(o.type) << " | `" << (e.default_value.empty() ? "\"\"" : e.default_value) << "` | "
       << (o.env.empty() ? "" : "`" + o.env + "`") << " | " << sentence(o.help);
    if (o.name == positional_) os << " May be given as the positional argument.";
    if (std::isfinite(o.min) && std::isfinite(o.max)) os << " Range [" << fmt_bound(o.min) << ", " << fmt_bound(o.max) << "].";
    else if (std::isfinite(o.min)) os << " At least " << fmt_bound(o.min) << ".";
    else if (std::isfinite(o.max)) os << " At most " << fmt_bound(o.max) << ".";
    if (!o.choices.empty()) {
      os << " One of:";
      for (const auto& c : o.choices) os << " `" << c << "`";
      os << ".";
    }
    os << " |\n";
  };
  for (const auto& e : entries_)
    if (!e.common) row(e);
  for (const auto& e : entries_)
    if (e.common) row(e);
  return os.str();
}

std::string Options::markdown() const {
  std::ostringstream os;
  os << "## " << program_ << "\n\n";
  if (!summary_.empty()) os << sentence(summary_) << "\n\n";
  os << "`" << program_ << " [--config FILE] [options]" << (positional_.empty() ? "" : " [" + positional_ + "]")
     << "`; config-file section `[" << section_ << "]`. Generated with `" << program_ << " --help-markdown`.\n\n"
     << markdown_table();
  return os.str();
}

std::optional<int> parse_command_line(Options& options, const std::vector<std::string>& args) {
  if (Status st = options.parse(args); !st.ok()) {
    std::fprintf(stderr, "%s: %s\n", options.program().c_str(), st.error().message.c_str());
    return 2;
  }
  if (options.version_requested()) {
    std::printf("%s %s\n", options.program().c_str(), std::string(kVersion).c_str());
    return 0;
  }
  if (options.help_markdown_requested()) {
    std::printf("%s", options.markdown().c_str());
    return 0;
  }
  if (options.help_requested()) {
    std::printf("%s", options.help().c_str());
    return 0;
  }
  log::set_level(options.common().log_level);
  log::set_format(options.common().log_format);
  return std::nullopt;
}

}  // namespace tessera::config
