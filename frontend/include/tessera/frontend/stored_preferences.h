// Stored preferences: each user's preference text and alpha kept in tessera-kvstore (so every
// frontend sharing that kvstore sees it; the admin endpoints write it), and the executor that
// runs every kvstore call of the frontend off the I/O threads.
//
// A request that names a user and no preference gets the user's stored preference: lookup()
// queues a kvstore `get` on a small pool of executor threads (each with its own kvstore client)
// and returns at once; the caller continues when `done` runs. The lookup has a per-request
// deadline: one still queued at its deadline is not sent, and the caller stops waiting for it at
// the deadline. Whatever goes wrong (kvstore down, timeout, bad value), the request runs without
// a stored preference (DESIGN.md: a kvstore problem is never a request failure); a failure is
// logged and counted, and lookups then skip the kvstore for a back-off period so requests do not
// each wait for a timeout while it is down. A request without a user never waits for the kvstore.
//
// Ownership: owns its executor threads and their kvstore clients. Destruction joins the threads
// (a call in progress finishes within the kvstore timeout); jobs still queued are destroyed
// without running. Threading: every public method is thread-safe. `done` and posted jobs run on
// an executor thread and must not block on anything but the kvstore client they are given.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "tessera/common/curve.h"
#include "tessera/common/metrics.h"
#include "tessera/common/protocol.h"
#include "tessera/common/result.h"

namespace tessera::kvstore {
class Client;
struct ClientPut;
}  // namespace tessera::kvstore

namespace tessera::frontend {

struct StoredPreference {
  std::string preference;
  float alpha = 0.5f;
};

struct StoredPreferencesConfig {
  std::string endpoint;  // tessera-kvstore; "" = none (enabled() is false, nothing is started)
  int timeout_ms = 2000;  // one kvstore reply, and a lookup's deadline
  int threads = 2;        // executor threads, one kvstore client each
  std::chrono::milliseconds backoff{5000};  // lookups skip the kvstore this long after a failure
  curve::ClientKeys curve;  // the kvstore's public key and ours (curve.h); empty = plain
};

class StoredPreferences {
 public:
  using Clock = std::chrono::steady_clock;
  using LookupDone = std::function<void(std::optional<StoredPreference>)>;
  using Job = std::function<void(kvstore::Client&)>;

  static Result<std::unique_ptr<StoredPreferences>> create(const StoredPreferencesConfig& config, metrics::Registry& registry);
  ~StoredPreferences();
  StoredPreferences(const StoredPreferences&) = delete;
  StoredPreferences& operator=(const StoredPreferences&) = delete;

  bool enabled() const { return enabled_; }
  // True when `request` should look up its user's stored preference: a kvstore is configured,
  // the request names a user and gives no preference.
  bool wants_lookup(const protocol::GenerateRequest& request) const;
  // The deadline of a lookup started now (now + the kvstore timeout).
  Clock::time_point deadline_from(Clock::time_point now) const;

  // Queues the lookup of `user`'s stored preference; `done` runs exactly once on an executor
  // thread with the preference, or nullopt (none stored, kvstore failure, back-off, deadline
  // passed before it was sent). Only when the StoredPreferences is destroyed first may `done`
  // be destroyed without running. Must be enabled().
  void lookup(std::string user, Clock::time_point deadline, LookupDone done);
  // Gives `request` the stored preference (when there is one) and counts it.
  void apply(protocol::GenerateRequest& request, const std::optional<StoredPreference>& stored);

  // Runs `job` on an executor thread with that thread's kvstore client (the admin endpoints).
  // Must be enabled().
  void post(Job job);

  // Blocking kvstore operations on a stored preference, for jobs (with their client).
  static Result<std::optional<StoredPreference>> load(kvstore::Client& kv, const std::string& user);
  static Result<kvstore::ClientPut> store(kvstore::Client& kv, const std::string& user, const StoredPreference& value);
  static Result<bool> remove(kvstore::Client& kv, const std::string& user);

 private:
  struct Executor;
  StoredPreferences(StoredPreferencesConfig config, metrics::Registry& registry);
  // On an executor thread: the lookup itself.
  std::optional<StoredPreference> run_lookup(kvstore::Client& kv, const std::string& user, Clock::time_point deadline);

  const StoredPreferencesConfig config_;
  const bool enabled_;
  metrics::Counter& lookups_;
  metrics::Counter& errors_;
  metrics::Counter& used_;
  std::atomic<int64_t> backoff_until_ns_{0};  // steady_clock nanoseconds; 0 = none
  std::unique_ptr<Executor> executor_;        // null when !enabled(); last member: joined first
};

}  // namespace tessera::frontend
