// Private: the admin endpoints (docs/api.md, "Admin"): a user's stored preference (GET, PUT,
// DELETE /admin/v1/users/{user}/preference) and per-user invalidation of the preference K/V in
// every tier (POST /admin/v1/users/{user}/invalidate: kvstore L1 + Redis, and the schedulers'
// radix pages through an InvalidateUser broadcast), and POST /admin/v1/drain (the frontend's
// graceful shutdown, as on SIGTERM: docs/operations.md "Drain"; answered 202 at once), and the
// pinned prefixes under /admin/v1/prefixes (prefix_admin.h: a PrefixCall, answered through the hub).
//
// Two steps so that no kvstore call runs on an I/O thread: route() does the cheap checks
// (token, route, user, method, kvstore configured) and either answers or returns the Call;
// run() does the Call's kvstore round trips, on a StoredPreferences executor thread with that
// thread's client.
//
// Ownership: references to components that outlive it. Threading: route() is const and
// thread-safe; run() may be called from several executor threads (admin calls are serialized
// by an internal mutex, so an invalidate's read-invalidate-rewrite is not interleaved with
// another admin write).
#pragma once

#include <functional>
#include <mutex>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

namespace tessera::kvstore {
class Client;
}

namespace tessera::metrics {
class Registry;
}

namespace tessera::frontend {

class Hub;

struct AdminReply {
  int status = 200;
  std::string body;  // JSON
};

// A pinned-prefix call (/admin/v1/prefixes, prefix_admin.h), answered through the hub.
struct PrefixCall {
  std::string method;  // POST | GET | DELETE
  std::string body;    // POST
  uint64_t hash = 0;   // DELETE
  int32_t limit = 0;   // GET
};

class AdminApi {
 public:
  struct Call {
    std::string method;  // GET | PUT | DELETE (preference), POST (invalidate)
    std::string user;    // decoded and validated
    bool preference = false;  // else invalidate
    std::string body;
  };

  // `token`: --admin-token ("" = endpoints answer 403); `kvstore`: whether one is configured.
  AdminApi(std::string token, bool kvstore, Hub& hub, metrics::Registry& registry);

  // `query`: what follows '?' in the target ("" when none).
  std::variant<AdminReply, Call, PrefixCall> route(std::string_view method, std::string_view path, std::string_view token,
                                                   const std::string& body, std::string_view query = "") const;
  AdminReply run(const Call& call, kvstore::Client& kv);
  // What POST /admin/v1/drain starts (Frontend::drain; false when already draining). Set once,
  // before the I/O threads run.
  void set_drain(std::function<bool()> drain) { drain_ = std::move(drain); }

 private:
  const std::string token_;
  const bool kvstore_;
  Hub& hub_;
  metrics::Registry& registry_;
  std::mutex mu_;  // serializes run()
  std::function<bool()> drain_;
};

}  // namespace tessera::frontend
