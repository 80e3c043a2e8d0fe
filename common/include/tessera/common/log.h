// Leveled logging to stderr. The level is checked before anything is formatted.
//
//   TS_LOG(kInfo) << "req=" << id << " admitted";
//   log::event(log::kInfo, "access", {{"req", id_text}, {"status", "200", true}});
//
// Two formats (--log-format, common to every binary; docs/operations.md):
//   text: "<ISO-8601 UTC time> <level> <process> <file:line> | message"
//   json: {"ts":"...","level":"info","process":"frontend","src":"file:line","msg":"..."}
// An event's fields follow its name in text ("access req=ab status=200") and are top-level keys
// in JSON ({"event":"access","req":"ab","status":200,...}). Set the process name once
// (log::set_component("scheduler")); context such as request or worker ids goes first in a
// message ("req=12 worker=0 | ..."). Every line is capped at kMaxLineBytes; bytes outside
// printable ASCII are written as \xNN, so a line is one line of valid UTF-8.
// Thread-safe: a line is written with one call.
#pragma once

#include <cstddef>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::log {

enum Level : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };
enum class Format : int { kText = 0, kJson = 1 };

inline constexpr size_t kMaxLineBytes = 4096;  // a longer message is cut and marked "...[+N bytes]"

Level level();
void set_level(Level level);
// Parses "debug|info|warn|error|off"; returns false and leaves the level unchanged otherwise.
bool set_level(std::string_view name);
Format format();
// Parses "text|json"; returns false and leaves the format unchanged otherwise.
bool set_format(std::string_view name);
void set_component(std::string_view name);
inline bool enabled(Level l) { return l >= level(); }

// One field of an event. `number`: the value is a JSON number (written unquoted in JSON).
struct Field {
  std::string key;
  std::string value;
  bool number = false;
};
// Writes one structured line (see above) when `level` is enabled.
void event(Level level, std::string_view name, const std::vector<Field>& fields);

// `s` with bytes outside printable ASCII (and the backslash) written as \xNN, cut to `max` bytes.
std::string escape(std::string_view s, size_t max = kMaxLineBytes);

class Line {
 public:
  Line(Level level, const char* file, int line);
  ~Line();
  std::ostream& stream() { return os_; }

 private:
  std::ostringstream os_;
  Level level_;
  const char* file_;
  int line_;
};

}  // namespace tessera::log

#define TS_LOG(lvl)                                  \
  if (!::tessera::log::enabled(::tessera::log::lvl)) \
    ;                                                \
  else                                               \
    ::tessera::log::Line(::tessera::log::lvl, __FILE__, __LINE__).stream()
