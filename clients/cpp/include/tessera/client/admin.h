// Admin operations of a Tessera frontend: a user's stored preference (set / get / delete) and
// invalidation of the user's preference K/V. The ZeroMQ client API has no admin messages, so
// AdminClient calls the frontend's HTTP admin routes (docs/api.md "Admin"; the frontend needs
// --admin-token and --kvstore) — the same operations, by the same names, as the Node client's
// AdminClient. Errors are the client's typed errors: NotFound (no stored preference),
// PermissionDenied (admin disabled, wrong token), BadRequest (a bad field), Unavailable (no
// kvstore, or the frontend cannot be reached), Timeout (no answer within the timeout).
//
//   tessera::client::AdminClient admin("http://127.0.0.1:8000", {.token = "s3cret"});
//   admin.set_preference("alice", "Alice likes short stories about dragons.", 0.5);
//
// Threading: every call opens its own HTTP/1.1 connection and blocks until the answer or the
// timeout; an AdminClient holds no connection and may be used from any number of threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tessera::client {

struct AdminOptions {
  std::string token;                          // the frontend's --admin-token (Bearer)
  std::chrono::milliseconds timeout{10000};   // the whole call: connect, send, answer
};

struct StoredPreference {
  std::string user;
  std::string preference;
  double alpha = 0.5;
};

struct Invalidation {
  std::string user;
  int64_t kvstore_l1 = 0;           // entries dropped from the kvstore's L1
  int64_t kvstore_l2 = 0;           // entries dropped from Redis
  int64_t schedulers_notified = 0;  // schedulers sent invalidate_user
};

class AdminClient {
 public:
  // `base_url`: "http://host:port" of the frontend's HTTP API (no TLS). Throws BadRequest for
  // another scheme or a malformed URL.
  explicit AdminClient(const std::string& base_url, AdminOptions options = {});

  // Stores `preference` (non-empty) with `alpha` in [0, 1] for `user`.
  StoredPreference set_preference(const std::string& user, const std::string& preference, double alpha = 0.5);
  // The stored preference of `user`; NotFound when none is stored.
  StoredPreference get_preference(const std::string& user);
  // Deletes it; whether there was one.
  bool delete_preference(const std::string& user);
  // Drops the user's preference K/V in every tier and tells every scheduler of the frontend.
  Invalidation invalidate(const std::string& user);

 private:
  std::string host_;
  std::string port_;
  AdminOptions options_;
};

}  // namespace tessera::client
