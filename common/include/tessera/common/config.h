// Options declared once (STYLE.md habit 11): each Option names its flag, config-file key,
// environment variable, default, help and validation; --help, flag parsing, the config file
// and the environment all come from that one table.
//
//   config::Options opts("tessera-frontend", "frontend");
//   opts.add({.name = "http-port", .type = config::Type::kInt, .default_value = "8000",
//             .help = "HTTP listen port", .env = "TESSERA_HTTP_PORT", .min = 0, .max = 65535});
//   TS_TRY(opts.parse(args));            // defaults < config file < environment < flags
//   int port = opts.get_int("http-port");
//
// Config file (--config FILE): lines `key = value` (key as the flag name, '-' or '_'), `#`
// comments, optional double quotes around values, and `[section]` headers: keys before any
// section and in this program's section apply; other sections are skipped (so one file can
// configure every process of `tessera up`). An unknown key in an applicable section is an
// error naming the file and line.
//
// Declaring an option twice or reading an undeclared one is a programming error (TS_CHECK).
// Bad values from any source are Result errors naming the option, the source and the value.
// Not thread-safe while parsing; read-only use afterwards is safe from any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"

namespace tessera::config {

enum class Type : uint8_t { kString, kInt, kFloat, kBool };

struct Option {
  std::string name;           // flag --name and config key; lower-case with dashes
  Type type = Type::kString;
  std::string default_value;  // parsed like any other value (must be valid)
  std::string help;
  std::string env;            // environment variable, "" = none
  double min = -std::numeric_limits<double>::infinity();  // kInt/kFloat bounds (inclusive)
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // kString: allowed values when non-empty
};

class Options {
 public:
  Options(std::string program, std::string section);

  // Declares an option. --config and --help are built in.
  Options& add(Option option);

  // Parses argv-style arguments (without the program name): `--name value`, `--name=value`,
  // bare `--flag` for booleans. Positional arguments are an error.
  Status parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_requested_; }
  std::string help() const;            // usage text listing every option, default and env var
  std::string markdown_table() const;  // for docs/configuration.md

  std::string get(std::string_view name) const;
  int64_t get_int(std::string_view name) const;
  double get_float(std::string_view name) const;
  bool get_bool(std::string_view name) const;
  // Where the value came from: "default", "file", "env" or "flag".
  std::string source(std::string_view name) const;

  // Sets a value as if given by a flag (validated).
  Status set(std::string_view name, std::string_view value, std::string_view source);

 private:
  struct Entry {
    Option option;
    std::string value;
    std::string source;
  };
  Entry& entry(std::string_view name);
  const Entry& entry(std::string_view name) const;
  Status load_file(const std::string& path);

  std::string program_;
  std::string section_;
  std::vector<Entry> entries_;  // declaration order (for --help)
  bool help_requested_ = false;
};

}  // namespace tessera::config
