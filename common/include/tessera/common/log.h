// Leveled logging to stderr. The level is checked before anything is formatted.
//
//   TS_LOG(kInfo) << "req=" << id << " admitted";
//
// Each line: "<time> <level> <component> <file:line> | message". Set the component once per
// process (log::set_component("scheduler")); context such as request or worker ids goes first
// in the message ("req=12 worker=0 | ..."), as llama.cpp's server stamps its lines.
// Thread-safe: a line is written with one call.
#pragma once

#include <sstream>
#include <string_view>

namespace tessera::log {

enum Level : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

Level level();
void set_level(Level level);
// Parses "debug|info|warn|error|off"; returns false and leaves the level unchanged otherwise.
bool set_level(std::string_view name);
void set_component(std::string_view name);
inline bool enabled(Level l) { return l >= level(); }

class Line {
 public:
  Line(Level level, const char* file, int line);
  ~Line();
  std::ostream& stream() { return os_; }

 private:
  std::ostringstream os_;
  Level level_;
};

}  // namespace tessera::log

#define TS_LOG(lvl)                                  \
  if (!::tessera::log::enabled(::tessera::log::lvl)) \
    ;                                                \
  else                                               \
    ::tessera::log::Line(::tessera::log::lvl, __FILE__, __LINE__).stream()
