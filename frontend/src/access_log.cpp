#include "access_log.h"

#include <cstdio>
#include <vector>

#include "tessera/common/hash.h"
#include "tessera/common/log.h"

namespace tessera::frontend {
namespace {

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

std::string user_hash(std::string_view user) {
  if (user.empty()) return "";
  char buf[24];
  std::snprintf(buf, sizeof buf, "%012llx",
                static_cast<unsigned long long>(mix64(fnv1a64(user) ^ 0x7465737365726175ULL) >> 16));
  return buf;
}

void log_access(const AccessRecord& a, double duration_ms) {
  const bool probe = a.route == "/health" || a.route == "/ready" || a.route == "/metrics";
  const log::Level level = probe && a.status >= 200 && a.status < 300 ? log::kDebug : log::kInfo;
  if (!log::enabled(level)) return;
  std::vector<log::Field> f{{"req", a.request_id},
                            {"client", a.client},
                            {"method", a.method},
                            {"route", a.route},
                            {"status", std::to_string(a.status), true}};
  if (a.generation) {
    f.push_back({"prompt_tokens", std::to_string(a.prompt_tokens), true});
    f.push_back({"cached_tokens", std::to_string(a.cached_tokens), true});
    f.push_back({"completion_tokens", std::to_string(a.completion_tokens), true});
    if (a.sequences > 1) f.push_back({"sequences", std::to_string(a.sequences), true});
    f.push_back({"ttft_ms", a.ttft_ms ? fixed(*a.ttft_ms, 1) : "", a.ttft_ms.has_value()});
  }
  f.push_back({"duration_ms", fixed(duration_ms, 1), true});
  if (a.generation) {
    f.push_back({"finish_reason", a.finish_reason});
    f.push_back({"user", user_hash(a.user)});
  }
  log::event(level, "access", f);
}

}  // namespace tessera::frontend
