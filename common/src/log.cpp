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

Format initial_format() {
  const char* env = std::getenv("TESSERA_LOG_FORMAT");
  return env != nullptr && std::string_view(env) == "json" ? Format::kJson : Format::kText;
}

std::atomic<int> g_level{initial_level()};
std::atomic<int> g_format{static_cast<int>(initial_format())};
std::mutex g_component_mu;
std::string g_component = "tessera";  // guarded by g_component_mu

const char* level_letter(Level l) {
  switch (l) {
    case kDebug: return "D";
    case kInfo: return "I";
    case kWarn: return "W";
    case kError: return "E";
    default: return "?";
  }
}

const char* level_word(Level l) {
  switch (l) {
    case kDebug: return "debug";
    case kInfo: return "info";
    case kWarn: return "warn";
    case kError: return "error";
    default: return "?";
  }
}

std::string component() {
  std::lock_guard lock(g_component_mu);
  return g_component;
}

// "2026-11-23T20:44:36.123Z"
std::string timestamp() {
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[40];
  size_t n = std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(stamp + n, sizeof stamp - n, ".%03dZ", static_cast<int>(ms % 1000));
  return stamp;
}

// JSON string body of an already escape()d text: only '"' needs escaping (escape() wrote every
// backslash and control byte as \xNN, so the backslashes it left are written as "\\").
void append_json_string(std::string& out, std::string_view escaped) {
  out += '"';
  for (char c : escaped) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
}

void write_line(std::string s) {
  s += '\n';
  std::fwrite(s.data(), 1, s.size(), stderr);
}

std::string text_prefix(Level level, const char* src) {
  std::string out = timestamp();
  out += ' ';
  out += level_letter(level);
  out += ' ';
  out += component();
  if (src != nullptr) {
    out += ' ';
    out += src;
  }
  out += " | ";
  return out;
}

std::string json_head(Level level, const char* src) {
  std::string out = "{\"ts\":\"" + timestamp() + "\",\"level\":\"" + level_word(level) + "\",\"process\":";
  append_json_string(out, escape(component(), 256));
  if (src != nullptr) {
    out += ",\"src\":";
    append_json_string(out, escape(src, 256));
  }
  return out;
}

bool text_needs_quotes(std::string_view v) {
  return v.empty() || v.find_first_of(" \"=") != std::string_view::npos;
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

Format format() { return static_cast<Format>(g_format.load(std::memory_order_relaxed)); }

bool set_format(std::string_view name) {
  if (name != "text" && name != "json") return false;
  g_format.store(static_cast<int>(name == "json" ? Format::kJson : Format::kText), std::memory_order_relaxed);
  return true;
}

void set_component(std::string_view name) {
  std::lock_guard lock(g_component_mu);
  g_component = std::string(name);
}

std::string escape(std::string_view s, size_t max) {
  std::string out;
  out.reserve(std::min(s.size(), max) + 16);
  size_t i = 0;
  for (; i < s.size() && out.size() < max; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (i < s.size()) out += "...[+" + std::to_string(s.size() - i) + " bytes]";
  return out;
}

void event(Level level, std::string_view name, const std::vector<Field>& fields) {
  if (!enabled(level)) return;
  constexpr size_t kFieldMax = 512;  // one field's value; the whole line stays under kMaxLineBytes
  if (format() == Format::kJson) {
    std::string out = json_head(level, nullptr) + ",\"event\":";
    append_json_string(out, escape(name, 64));
    for (const Field& f : fields) {
      if (out.size() > kMaxLineBytes - kFieldMax) break;
      out += ',';
      append_json_string(out, escape(f.key, 64));
      out += ':';
      if (f.number) out += f.value.empty() ? std::string("null") : escape(f.value, 64);
      else append_json_string(out, escape(f.value, kFieldMax));
    }
    write_line(out + "}");
    return;
  }
  std::string out = text_prefix(level, nullptr);
  out += escape(name, 64);
  for (const Field& f : fields) {
    if (out.size() > kMaxLineBytes - kFieldMax) break;
    out += ' ' + escape(f.key, 64) + '=';
    std::string v = escape(f.value, kFieldMax);
    if (text_needs_quotes(v)) {
      out += '"';
      for (char c : v) out += c == '"' ? '\'' : c;
      out += '"';
    } else {
      out += v;
    }
  }
  write_line(std::move(out));
}

Line::Line(Level level, const char* file, int line) : level_(level), file_(file), line_(line) {}

Line::~Line() {
  const char* base = std::strrchr(file_, '/');
  std::string src = std::string(base ? base + 1 : file_) + ':' + std::to_string(line_);
  const std::string msg = escape(os_.str());
  if (format() == Format::kJson) {
    std::string out = json_head(level_, src.c_str()) + ",\"msg\":";
    append_json_string(out, msg);
    write_line(out + "}");
  } else {
    write_line(text_prefix(level_, src.c_str()) + msg);
  }
}

}  // namespace tessera::log
