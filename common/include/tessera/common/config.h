// Options declared once (STYLE.md habit 11). Each option is bound to a member of the program's
// config struct; the member's initializer is the option's default (the one place a default is
// written), and the Option names its flag, config-file key, environment variable, help and
// validation. --help, --help-markdown, flag parsing, the config file and the environment all
// come from that one table.
//
//   struct FrontendConfig { int http_port = 8000; ... };          // the default lives here
//   FrontendConfig c;
//   config::Options opts("tessera-frontend", "frontend");
//   opts.add(c.http_port, {.name = "http-port", .help = "HTTP listen port", .env = "TESSERA_HTTP_PORT",
//                          .min = 0, .max = 65535});               // type and default from c.http_port
//   if (auto exit_code = config::parse_command_line(opts, args)) return *exit_code;
//   // c.http_port now holds default < config file < environment < flag
//
// Every table has the common options, declared here once: --log-level (TESSERA_LOG_LEVEL),
// --log-format text|json (TESSERA_LOG_FORMAT),
// --config FILE (TESSERA_CONFIG), --help, --help-markdown and --version (kVersion, the CMake
// project version).
//
// Config file (--config FILE): lines `key = value` (key as the flag name, '-' or '_'), `#`
// comments, optional double quotes around values, and `[section]` headers: keys before any
// section and in this program's section apply; other sections are skipped (so one file can
// configure every process of `tessera up`). An unknown key in an applicable section is an
// error naming the file and line.
//
// Ownership: an Options object keeps references to the members it is bound to; they must
// outlive it. Declaring an option twice or reading an undeclared one is a programming error
// (TS_CHECK). Bad values from any source are Result errors naming the option, the source and
// the value. Not thread-safe while parsing; read-only use afterwards is safe from any thread.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tessera/common/result.h"

namespace tessera::config {

enum class Type : uint8_t { kString, kInt, kFloat, kBool };

// What an option is, apart from its default (which is the bound member's value) and its type
// (which follows from the member's C++ type, or is given for a custom binding).
struct Option {
  std::string name;  // flag --name and config key; lower-case with dashes
  std::string help;
  std::string env;   // environment variable, "" = none
  double min = -std::numeric_limits<double>::infinity();  // int/float bounds (inclusive)
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // string: allowed values when non-empty
  Type type = Type::kString;         // custom bindings only; add(member, ...) sets it
};

// The options every table has (declared once, in the Options constructor).
struct CommonConfig {
  std::string log_level = "info";  // debug | info | warn | error | off
  std::string log_format = "text";  // text | json
};

class Options {
 public:
  // `section` is the config-file section this program reads ("frontend" reads [frontend]).
  Options(std::string program, std::string section);
  Options(const Options&) = delete;  // bindings point into the owner's structs (and common_)
  Options& operator=(const Options&) = delete;

  // Declares an option bound to `member`: its type follows from the member's type (string,
  // bool, integers, floating point, or vector<string> as a comma-separated list) and its
  // default is the member's current value. Integers are range-checked against their C++ type
  // as well as option.min/max.
  template <class T>
  Options& add(T& member, Option option);

  // A custom binding (an enum, an optional): `current` is the default as text, `store`
  // receives every accepted value in canonical form. option.type says how values are checked.
  using Store = std::function<void(const std::string& canonical)>;
  Options& add(Option option, std::string current, Store store);

  // A bare argument (not starting with --) is taken as the value of this declared option; at
  // most one. Help shows it as `NAME`.
  Options& positional(std::string_view name);
  // One paragraph for --help and --help-markdown, and the usage line's tail ("[options]").
  Options& describe(std::string summary);

  // Parses argv-style arguments (without the program name): `--name value`, `--name=value`,
  // bare `--flag` for booleans. Precedence: defaults < config file < environment < flags.
  // Bound members are updated as values are accepted.
  Status parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_requested_; }
  bool help_markdown_requested() const { return help_markdown_requested_; }
  bool version_requested() const { return version_requested_; }

  std::string help() const;            // usage text listing every option, default and env var
  std::string markdown() const;        // a docs/configuration.md section: heading, summary, table
  std::string markdown_table() const;  // just the table

  const std::string& program() const { return program_; }
  const std::string& section() const { return section_; }
  const CommonConfig& common() const { return common_; }
  // The config file in effect after parse() (--config or TESSERA_CONFIG), "" = none.
  const std::string& config_file() const { return config_file_; }

  bool has(std::string_view name) const;
  // The declaration of `name` (TS_CHECK that it exists), e.g. for `tessera up` to re-export a
  // child's option under its own table.
  const Option& option(std::string_view name) const;
  std::vector<std::string> names() const;  // declaration order, common options included

  std::string get(std::string_view name) const;
  int64_t get_int(std::string_view name) const;
  double get_float(std::string_view name) const;
  bool get_bool(std::string_view name) const;
  // Where the value came from: "default", "flag", "env NAME" or "FILE:LINE".
  std::string source(std::string_view name) const;

  // Sets a value as if given by `source` (validated; the bound member is updated).
  Status set(std::string_view name, std::string_view value, std::string_view source);

 private:
  struct Entry {
    Option option;
    std::string default_value;
    std::string value;
    std::string source;
    Store store;
    double type_min, type_max;  // the bound C++ type's range
    bool common = false;
  };
  Options& add_entry(Option option, std::string current, Store store, double type_min, double type_max);
  Entry& entry(std::string_view name);
  const Entry& entry(std::string_view name) const;
  Status load_file(const std::string& path);

  std::string program_;
  std::string section_;
  std::string summary_;
  std::string positional_;
  std::string config_file_;
  CommonConfig common_;
  std::vector<Entry> entries_;  // declaration order (for --help)
  bool help_requested_ = false;
  bool help_markdown_requested_ = false;
  bool version_requested_ = false;
};

// The front door of every binary and subcommand: parses `args`; on --help, --help-markdown or
// --version prints to stdout and returns 0; on a bad argument prints "<program>: <message>" to
// stderr and returns 2; otherwise sets the log level from --log-level and returns nullopt.
std::optional<int> parse_command_line(Options& options, const std::vector<std::string>& args);

// Text of a value as the table stores it (shortest round-trip form for floating point).
std::string format_double(double v);

// ---- implementation of the template -------------------------------------------------------

namespace detail {
std::vector<std::string> split_list(const std::string& s);
std::string join_list(const std::vector<std::string>& v);
}  // namespace detail

template <class T>
Options& Options::add(T& member, Option option) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  T* m = &member;
  if constexpr (std::is_same_v<T, std::string>) {
    option.type = Type::kString;
    return add_entry(std::move(option), member, [m](const std::string& v) { *m = v; }, -kInf, kInf);
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    option.type = Type::kString;
    return add_entry(std::move(option), detail::join_list(member),
                     [m](const std::string& v) { *m = detail::split_list(v); }, -kInf, kInf);
  } else if constexpr (std::is_same_v<T, bool>) {
    option.type = Type::kBool;
    return add_entry(std::move(option), member ? "true" : "false", [m](const std::string& v) { *m = v == "true"; },
                     -kInf, kInf);
  } else if constexpr (std::is_integral_v<T>) {
    option.type = Type::kInt;
    // Bounds of the C++ type, kept within what strtoll reads.
    const double lo = static_cast<double>(std::numeric_limits<T>::min());
    const double hi = std::min(static_cast<double>(std::numeric_limits<T>::max()),
                               static_cast<double>(std::numeric_limits<int64_t>::max()));
    return add_entry(std::move(option), std::to_string(member),
                     [m](const std::string& v) {
                       int64_t x = 0;
                       std::from_chars(v.data(), v.data() + v.size(), x);
                       *m = static_cast<T>(x);
                     },
                     lo, hi);
  } else if constexpr (std::is_floating_point_v<T>) {
    option.type = Type::kFloat;
    std::string current;
    if constexpr (std::is_same_v<T, float>) {
      char buf[64];
      auto r = std::to_chars(buf, buf + sizeof(buf), member);
      current.assign(buf, r.ptr);
    } else {
      current = format_double(static_cast<double>(member));
    }
    return add_entry(std::move(option), std::move(current),
                     [m](const std::string& v) { *m = static_cast<T>(std::strtod(v.c_str(), nullptr)); }, -kInf, kInf);
  } else {
    static_assert(sizeof(T) == 0, "bind a string, bool, integer, floating point or vector<string> member, "
                                  "or use add(Option, current, store)");
  }
}

}  // namespace tessera::config
