// Private: the pinned-prefix admin routes (docs/api.md "Pinned prefixes"), after AdminApi has
// checked the admin token:
//   POST   /admin/v1/prefixes          pin a prefix ({"prompt"} | {"messages"} | {"tokens"}, optional
//                                      "workers", "tenant", "cache_salt"), prewarmed first
//   GET    /admin/v1/prefixes?limit=N  pins, and the N most hit cached prefixes of every worker
//   DELETE /admin/v1/prefixes/{hash}   unpin (16 hex digits, as listed)
// parse_prefix_call() does the cheap checks on an I/O thread; run_prefix_call() tokenizes,
// sends prefix_admin through the hub and calls `done` once with the reply (on the hub thread,
// or at once on an input error).
//
// Threading: both functions are thread-safe (the preparer is immutable; the hub is thread-safe).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "admin.h"

namespace tessera::frontend {

class Hub;
class RequestPreparer;

// `path` starts with /admin/v1/prefixes; `query` is what follows '?' ("" when none). An
// AdminReply when the call is refused (405, 404, 400), else the call.
std::variant<AdminReply, PrefixCall> parse_prefix_call(std::string_view method, std::string_view path, std::string_view query,
                                                       const std::string& body);
void run_prefix_call(const PrefixCall& call, const RequestPreparer& preparer, Hub& hub, std::function<void(AdminReply)> done);

}  // namespace tessera::frontend
