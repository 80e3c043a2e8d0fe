// Options of its children that `tessera up` re-exports under its own table (tools/src/cmd_up.cpp):
// the child's declaration (type, default, checks, help) with the environment variable
// TESSERA_UP_<NAME>. Two kinds:
//   - shared ones (model, num-pages, kv-dtype, ...): bound to `up`'s config and always passed on;
//   - pass-through ones (kWorkerPassThrough, kSchedulerPassThrough: K/V offload, CacheBlend, pacing):
//     held only in `up`'s table and passed on only when given (flag, environment or the [up]
//     section of --config), so a [worker] / [scheduler] section of the same file still applies
//     when they are not.
// Stateless functions over the tables; call from one thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/common/config.h"

namespace tessera::tools::up {

// The worker's K/V offload, blob codec and CacheBlend options (docs/kv.md) and its pacing
// (--min-step-ms, docs/operations.md "Pacing").
extern const std::vector<std::string_view> kWorkerPassThrough;
// The scheduler's K/V offload options (docs/kv.md "K/V offload") and its step token budget
// (--max-step-tokens, at least --max-running: how many steps a long CacheBlend prompt takes,
// docs/kv.md "CacheBlend").
extern const std::vector<std::string_view> kSchedulerPassThrough;

// The child's option `name` as `up` declares it: the same declaration, env TESSERA_UP_<NAME>.
config::Option shared(const config::Options& child, std::string_view name);

// Declares each of `names` (declared by `child`) in `up`'s table, default the child's.
void declare_pass_through(config::Options& up, const config::Options& child, const std::vector<std::string_view>& names);

// (name, value) of each of `names` given to `up` (its source is not the default).
std::vector<std::pair<std::string, std::string>> given(const config::Options& up, const std::vector<std::string_view>& names);

}  // namespace tessera::tools::up
