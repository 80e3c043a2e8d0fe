#include "tessera/common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

namespace tessera::log {
namespace {

Level initial_level() {
  const char* env = std::getenv("TESSERA_LOG_LEVEL");
  if (env == nullptr) return kInfo;
  std::string_view v(env);
  if (v == "debug") return kDebug;
  if (v == "warn") return kWarn;
  if (v == "error") return kError;
  if (v == "off") return kOff;
  return kInfo;
}

std::atomic<int> g_level{initial_level()};
std::mutex g_component_mu;
std::string g_component = "tessera";  // guarded by g_component_mu

const char* level_name(Level l) {
  switch (l) {
    case kDebug: return "D";
    case kInfo: return "I";
    case kWarn: return "W";
    case kError: return "E";
    default: return "?";
  }
}

}  // namespace

Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }
void set_level(Level l) { g_level.store(l, std::memory_order_relaxed); }

bool set_level(std::string_view name) {
  static constexpr std::pair<std::string_view, Level> kNames[] = {
      {"debug", kDebug}, {"info", kInfo}, {"warn", kWarn}, {"error", kError}, {"off", kOff}};
  for (const auto& [n, l] : kNames) {
    if (n == name) {
      set_level(l);
      return true;
    }
  }
  return false;
}

void set_component(std::string_view name) {
  std::lock_guard lock(g_component_mu);
  g_component = std::string(name);
}

Line::Line(Level level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
  char millis[8];
  std::snprintf(millis, sizeof millis, ".%03d", static_cast<int>(ms % 1000));
  std::string component;
  {
    std::lock_guard lock(g_component_mu);
    component = g_component;
  }
  os_ << stamp << millis << ' ' << level_name(level) << ' ' << component << ' '
      << (base ? base + 1 : file) << ':' << line << " | ";
}

Line::~Line() {
  os_ << '\n';
  std::string s = os_.str();
  std::fwrite(s.data(), 1, s.size(), stderr);
  (void)level_;
}

}  // namespace tessera::log
