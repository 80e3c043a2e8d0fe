// Intake: a frontend's decoded generate request -> the scheduler Request the batchers take.
//
// It owns the two policies every request crosses before it is routed:
//   * validation against the serving model (token ids inside the vocabulary, a non-empty prompt,
//     preference tokens present when a preference is, a user id within dki::kMaxUserBytes);
//   * the K/V namespace policy (DESIGN.md, K/V data model; docs/preference.md):
//       - model_fingerprint = the workers' fingerprint (16 hex digits, dki::hex16);
//       - tenant_salt = tenant_salt(r.tenant, r.cache_salt): the wire field `tenant` (the API
//         key's tenant, filled by the frontend) and `cache_salt` (the client's), so two tenants
//         never share prefix-cache pages while one tenant's requests still do; "" for the
//         default tenant without a cache_salt (the namespace and routing of a keyless cluster);
//       - prefix cache off => tenant_salt "no-prefix-cache:<id>": every request its own namespace;
//       - a preference whose dki::effective_alpha is set (alpha > 0.1) => user, content hash
//         (dki::preference_hash seeded with the fingerprint, never 0), effective alpha, the fill's
//         blob key (dki::make_blob_key) and, after invalidate_user(user), "|pref-epoch:<n>" in
//         the salt so the pages cached under an older epoch are never matched again; an empty
//         user gets the private namespace "\x01anonymous:<id>" (never shared, never cached);
//       - alpha <= 0.1 => no preference at all (a plain request).
//   * the routing key: the wire field `routing_key` (routing_key_for() at the frontend) is kept
//     in Request::routing_key; Router::routing_key() hashes it (router.h).
//
// Ownership/threading: an Intake is a value owned by the scheduler's event loop; not
// thread-safe. Invariant: epochs only grow (an invalidated user never returns to an old one).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "tessera/common/protocol.h"
#include "tessera/common/result.h"
#include "tessera/scheduler/request.h"

namespace tessera::scheduler {

// What intake needs to know of the workers (all registered workers share one model).
inline constexpr std::string_view kDefaultTenant = "default";

struct WorkerFacts {
  int32_t vocab_size = 0;          // 0 = unknown: token ids are only checked to be >= 0
  uint64_t model_fingerprint = 0;  // RegisterWorker::model_fingerprint
};

struct IntakeConfig {
  bool prefix_cache = true;  // false: every request gets a namespace of its own (no K/V reuse)
};

struct Admission {
  Request request;
  bool has_preference = false;  // a preference fill was planned (usage reports its source)
};

class Intake {
 public:
  explicit Intake(IntakeConfig config = {}) : config_(config) {}

  // kInvalidArgument naming the offending field (and index) when `r` cannot be served by a
  // model with `facts`; ok otherwise.
  static Status validate(const protocol::GenerateRequest& r, const WorkerFacts& facts);

  // validate(), then the scheduler Request with internal id `id` (unique among live requests)
  // and its namespace. Consumes the token vectors of `r`.
  Result<Admission> admit(protocol::GenerateRequest r, uint64_t id, const WorkerFacts& facts) const;

  // The K/V namespace salt of `tenant` ("" = kDefaultTenant) and `cache_salt`: "" when both
  // are default/empty, else a length-prefixed "tenant:<n>:<tenant>[|cache_salt:<n>:<salt>]".
  static std::string tenant_salt(std::string_view tenant, std::string_view cache_salt);

  // Admin invalidate of a user's preference K/V: later requests of `user` get a new namespace
  // epoch. Returns the new epoch (>= 1).
  uint64_t invalidate_user(const std::string& user);
  uint64_t epoch(const std::string& user) const;  // 0 until the first invalidate

  const IntakeConfig& config() const { return config_; }

 private:
  IntakeConfig config_;
  std::unordered_map<std::string, uint64_t> preference_epoch_;  // user -> InvalidateUser count
};

}  // namespace tessera::scheduler
