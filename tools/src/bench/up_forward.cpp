#include "up_forward.h"

#include <cctype>

namespace tessera::tools::up {

const std::vector<std::string_view> kWorkerPassThrough = {
    "kv-offload",        "kv-offload-codec",  "kv-offload-dtype", "kv-offload-max-pending-mb",
    "kv-codec",          "kv-codec-step",     "kv-codec-recent",  "kv-codec-decay",
    "blend-recompute-ratio", "blend-check-layer", "blend-cache-mb", "min-step-ms"};
const std::vector<std::string_view> kSchedulerPassThrough = {"kv-offload-min-pages", "kv-offload-max-entries", "max-step-tokens",
                                                             "max-running"};

config::Option shared(const config::Options& child, std::string_view name) {
  config::Option o = child.option(name);
  o.env = "TESSERA_UP_";
  for (char ch : o.name) o.env += ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return o;
}

void declare_pass_through(config::Options& up, const config::Options& child, const std::vector<std::string_view>& names) {
  // The value lives in `up`'s table only (read back with get()): nothing to store elsewhere.
  for (std::string_view n : names) up.add(shared(child, n), child.get(n), [](const std::string&) {});
}

std::vector<std::pair<std::string, std::string>> given(const config::Options& up, const std::vector<std::string_view>& names) {
  std::vector<std::pair<std::string, std::string>> out;
  for (std::string_view n : names)
    if (up.source(n) != "default") out.emplace_back(std::string(n), up.get(n));
  return out;
}

}  // namespace tessera::tools::up
