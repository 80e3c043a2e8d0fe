// API keys: who a request comes from (docs/api.md "Authentication and tenants",
// docs/security.md "Identity and tenant isolation").
//
// A key names a principal: its tenant (the prefix-cache scope the scheduler salts namespaces
// with) and the users it may act for (stored preferences; `usage.preference`). Keys come from
// --api-key (tenant "default", any user) and --api-keys-file, one key per line:
//     <key> <tenant> [<user>,<user>,... | *]
// '#' starts a comment line; blank lines are skipped; no user list = the key may name no user.
// Without any key configured the frontend is open: every request is tenant "default" and may
// name any user (the behaviour before keys existed).
//
// Ownership: a value built once at start-up (create()/parse()). Threading: immutable after
// construction; every method is const and may run on any number of threads at once. Keys are
// held only as SHA-256 digests, so a lookup's timing depends on the digest, not on the key.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>

#include "tessera/common/protocol.h"
#include "tessera/common/result.h"
#include "tessera/frontend/frontend.h"

namespace tessera::frontend {

struct Principal {
  std::string tenant = "default";
  bool any_user = true;        // '*' (or --api-key, or no keys configured)
  std::set<std::string> users;  // when !any_user: the users this key may name

  bool may_act_for(const std::string& user) const { return user.empty() || any_user || users.count(user) > 0; }
};

// Why a request was refused: 401 (no or unknown key) or 403 (a user the key may not name).
struct AuthFailure {
  int http_status = 401;
  std::string code;     // "invalid_api_key" | "user_not_allowed"
  std::string message;  // never says whether a user has a stored preference
};

class ApiKeys {
 public:
  ApiKeys() = default;  // no keys: open

  // --api-key and --api-keys-file (kIoError when the file cannot be read; kInvalidArgument
  // naming the file and line for a bad line).
  static Result<ApiKeys> create(const FrontendConfig& config);
  // The keys-file text; `origin` names it in errors ("<origin> line <n>: ...").
  static Result<ApiKeys> parse(std::string_view text, std::string_view origin);

  bool enabled() const { return !by_digest_.empty(); }
  size_t size() const { return by_digest_.size(); }

  // The principal of `key` (the bearer token or the ZeroMQ `api_key`); the open principal when
  // no keys are configured. An AuthFailure (401) for a missing or unknown key.
  std::variant<Principal, AuthFailure> authenticate(std::string_view key) const;
  // From an HTTP Authorization header value (nullopt = absent): "Bearer <key>" only.
  std::variant<Principal, AuthFailure> authenticate_header(std::optional<std::string_view> authorization) const;
  // `r.user` against `p` (AuthFailure 403 naming the user), then r.tenant = p.tenant and
  // r.api_key cleared (it never leaves the frontend).
  static std::optional<AuthFailure> authorize(const Principal& p, protocol::GenerateRequest& r);

 private:
  using Digest = std::array<uint8_t, 32>;
  struct DigestHash {
    size_t operator()(const Digest& d) const;
  };
  static Digest digest(std::string_view key);
  Status parse_into(std::string_view text, std::string_view origin);
  Status add(std::string_view key, Principal p, std::string_view where);

  std::unordered_map<Digest, Principal, DigestHash> by_digest_;
};

}  // namespace tessera::frontend
