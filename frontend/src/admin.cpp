// Admin endpoints (docs/api.md, "Admin"): a user's stored preference, kept in the kvstore so
// every frontend sharing that kvstore (and its Redis) sees it, and per-user invalidation of the
// preference K/V in every tier (kvstore L1 + Redis, and the schedulers' radix pages).
#include <chrono>
#include <nlohmann/json.hpp>
#include <openssl/crypto.h>
#include <optional>

#include "frontend_impl.h"
#include "tessera/common/log.h"
#include "tessera/kvstore/blob.h"
#include "tessera/kvstore/client.h"

namespace tessera::frontend {

using json = nlohmann::json;

namespace {

// The stored preference of a user is a kvstore blob under this reserved key (no model computes
// with a fingerprint equal to "TESSPREF", and K/V blob hashes are 16 hex digits).
constexpr uint64_t kStoredPreferenceFingerprint = 0x5445535350524546ull;
constexpr std::string_view kStoredPreferenceHash = "stored-preference-v1";
// A kvstore failure makes stored-preference lookups skip the kvstore for this long, so requests
// do not each wait for a timeout while it is down.
constexpr auto kLookupBackoff = std::chrono::seconds(5);

// The kvstore only takes packed K/V blobs (blob.h), so the stored preference's JSON travels as
// the bytes of the K region of a one-layer, one-head, head_dim-1 f32 blob with codec "none"
// (bytes kept verbatim and checksummed), padded with JSON whitespace to whole elements.
Result<std::string> json_to_blob(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  text.resize((text.size() + 3) / 4 * 4, ' ');
  kvstore::PackedKv kv{.fingerprint = kStoredPreferenceFingerprint, .dtype = DType::kF32,
                       .shape = {.n_layers = 1, .n_tokens = static_cast<uint32_t>(text.size() / 4), .n_kv_heads = 1, .head_dim = 1}};
  kv.k.assign(text.begin(), text.end());
  kv.v.assign(text.size(), 0);
  return kvstore::encode_blob(kv, {.codec = kvstore::Codec::kNone});
}

Result<json> blob_to_json(std::string_view blob) {
  TS_ASSIGN_OR_RETURN(kvstore::PackedKv kv, kvstore::decode_blob(blob, {.expected_fingerprint = kStoredPreferenceFingerprint}));
  json j = json::parse(kv.k.begin(), kv.k.end(), nullptr, false);
  if (j.is_discarded()) return make_error(ErrorCode::kCorruptFile, "stored preference is not JSON");
  return j;
}

kvstore::BlobKey stored_key(const std::string& user) {
  return kvstore::BlobKey{.fingerprint = kStoredPreferenceFingerprint, .user = user, .hash = std::string(kStoredPreferenceHash)};
}

AdminReply reply(int status, const json& body) { return {status, body.dump(-1, ' ', false, json::error_handler_t::replace)}; }
AdminReply fail(int status, const Error& e) { return {status, error_json(e)}; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decoding of one path segment; nullopt when an escape is malformed.
std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

}  // namespace

Result<std::optional<StoredPreference>> Frontend::Impl::load_stored_preference(const std::string& user) {
  if (!kv) return std::optional<StoredPreference>{};
  std::lock_guard<std::mutex> lock(kv_mu);
  TS_ASSIGN_OR_RETURN(kvstore::ClientGet got, kv->get(stored_key(user)));
  if (!got.found) return std::optional<StoredPreference>{};
  TS_ASSIGN_OR_RETURN(json j, blob_to_json(got.blob));
  if (!j.is_object() || !j.contains("preference") || !j["preference"].is_string() || !j.contains("alpha") ||
      !j["alpha"].is_number())
    return make_error(ErrorCode::kCorruptFile, "stored preference of user '" + user + "' is not {preference, alpha} JSON");
  return std::optional<StoredPreference>{StoredPreference{j["preference"].get<std::string>(), j["alpha"].get<float>()}};
}

Status Frontend::Impl::apply_stored_preference(protocol::GenerateRequest& r) {
  if (!kv || r.user.empty() || !r.preference.empty()) return ok_status();
  {
    std::lock_guard<std::mutex> lock(kv_mu);
    if (std::chrono::steady_clock::now() < kv_backoff_until) return ok_status();
  }
  auto stored = load_stored_preference(r.user);
  if (!stored.ok()) {
    // The request is served without the stored preference rather than failed (DESIGN.md: a
    // kvstore problem is never a request failure).
    TS_LOG(kWarn) << "user=" << r.user << " | stored preference lookup failed: " << stored.error().to_string();
    registry.counter("tessera_frontend_stored_preference_errors_total",
                     "stored-preference lookups that failed (kvstore unreachable or bad value); the request ran without it")
        .inc();
    std::lock_guard<std::mutex> lock(kv_mu);
    kv_backoff_until = std::chrono::steady_clock::now() + kLookupBackoff;
    return ok_status();
  }
  if (stored->has_value()) {
    r.preference = (*stored)->preference;
    r.preference_alpha = (*stored)->alpha;
    registry.counter("tessera_frontend_stored_preference_used_total", "requests given their user's stored preference").inc();
  }
  return ok_status();
}

AdminReply Frontend::Impl::admin(std::string_view method, std::string_view path, std::string_view token, const std::string& body) {
  if (config.admin_token.empty())
    return fail(403, make_error(ErrorCode::kPermissionDenied,
                                "admin endpoints are disabled: start tessera-frontend with --admin-token (or TESSERA_ADMIN_TOKEN)"));
  if (token.size() != config.admin_token.size() ||
      CRYPTO_memcmp(token.data(), config.admin_token.data(), token.size()) != 0)
    return fail(401, make_error(ErrorCode::kPermissionDenied,
                                "missing or wrong admin token (send 'Authorization: Bearer <token>')"));
  // /admin/v1/users/{user}/{preference|invalidate}
  constexpr std::string_view kPrefix = "/admin/v1/users/";
  const bool under_users = path.substr(0, kPrefix.size()) == kPrefix;
  const std::string_view rest = under_users ? path.substr(kPrefix.size()) : std::string_view();
  const size_t slash = rest.rfind('/');
  if (!under_users || slash == std::string_view::npos || slash == 0)
    return fail(404, make_error(ErrorCode::kNotFound, "unknown admin route " + std::string(path) +
                                                          " (routes: /admin/v1/users/{user}/preference, /admin/v1/users/{user}/invalidate)"));
  const std::string_view action = rest.substr(slash + 1);
  auto user = percent_decode(rest.substr(0, slash));
  if (!user) return fail(400, make_error(ErrorCode::kInvalidArgument, "user in the path has a malformed %-escape"));
  if (std::string why = kvstore::validate_user(*user); !why.empty())
    return fail(400, make_error(ErrorCode::kInvalidArgument, "user: " + why));
  if (action != "preference" && action != "invalidate")
    return fail(404, make_error(ErrorCode::kNotFound, "unknown admin action '" + std::string(action) + "' (preference, invalidate)"));
  const bool pref = action == "preference";
  if ((pref && method != "PUT" && method != "GET" && method != "DELETE") || (!pref && method != "POST"))
    return fail(405, make_error(ErrorCode::kInvalidArgument, "method " + std::string(method) + " is not allowed on " + std::string(path)));
  if (!kv)
    return fail(503, make_error(ErrorCode::kUnavailable,
                                "no kvstore configured: start tessera-frontend with --kvstore ENDPOINT (or TESSERA_FRONTEND_KVSTORE)"));
  auto kv_fail = [](const Error& e) { return fail(e.code == ErrorCode::kInvalidArgument ? 400 : 503, e); };

  if (pref && method == "GET") {
    auto got = load_stored_preference(*user);
    if (!got.ok()) return kv_fail(got.error());
    if (!got->has_value()) return fail(404, make_error(ErrorCode::kNotFound, "user '" + *user + "' has no stored preference"));
    return reply(200, {{"user", *user}, {"preference", (*got)->preference}, {"alpha", (*got)->alpha}});
  }
  if (pref && method == "PUT") {
    json j = json::parse(body, nullptr, false);
    if (!j.is_object()) return fail(400, make_error(ErrorCode::kMalformedMessage, "body must be a JSON object {\"preference\", \"alpha\"}"));
    if (!j.contains("preference") || !j["preference"].is_string() || j["preference"].get<std::string>().empty())
      return fail(400, make_error(ErrorCode::kInvalidArgument, "preference must be a non-empty string"));
    float alpha = 0.5f;
    if (j.contains("alpha")) {
      if (!j["alpha"].is_number()) return fail(400, make_error(ErrorCode::kInvalidArgument, "alpha must be a number"));
      alpha = j["alpha"].get<float>();
      if (!(alpha >= 0.0f && alpha <= 1.0f))
        return fail(400, make_error(ErrorCode::kOutOfRange, "alpha must be in [0, 1] (got " + std::to_string(alpha) + ")"));
    }
    const std::string text = j["preference"].get<std::string>();
    auto blob = json_to_blob({{"preference", text}, {"alpha", alpha}});
    if (!blob.ok()) return fail(500, blob.error());
    std::lock_guard<std::mutex> lock(kv_mu);
    auto put = kv->put(stored_key(*user), *blob);
    if (!put.ok()) return kv_fail(put.error());
    return reply(200, {{"user", *user}, {"preference", text}, {"alpha", alpha}, {"stored", {{"l1", put->l1}, {"l2", put->l2}}}});
  }
  if (pref && method == "DELETE") {
    std::lock_guard<std::mutex> lock(kv_mu);
    auto removed = kv->remove(stored_key(*user));
    if (!removed.ok()) return kv_fail(removed.error());
    return reply(200, {{"user", *user}, {"deleted", *removed}});
  }
  // POST invalidate: every tier of the user's preference K/V. invalidate_user also removes the
  // stored preference text (same user partition), so it is read first and put back.
  auto stored = load_stored_preference(*user);
  if (!stored.ok()) return kv_fail(stored.error());
  kvstore::InvalidateResult cleared;
  {
    std::lock_guard<std::mutex> lock(kv_mu);
    auto inv = kv->invalidate_user(*user);
    if (!inv.ok()) return kv_fail(inv.error());
    cleared = *inv;
    if (stored->has_value()) {
      auto blob = json_to_blob({{"preference", (*stored)->preference}, {"alpha", (*stored)->alpha}});
      if (!blob.ok()) return fail(500, blob.error());
      auto put = kv->put(stored_key(*user), *blob);
      if (!put.ok()) return kv_fail(put.error());
    }
  }
  const size_t schedulers = hub->broadcast(protocol::encode(protocol::InvalidateUser{.id = hub->next_id(), .user = *user}));
  registry.counter("tessera_frontend_admin_invalidations_total", "users invalidated through POST /admin/v1/users/{user}/invalidate").inc();
  TS_LOG(kInfo) << "user=" << *user << " | invalidated: kvstore l1 " << cleared.l1 << ", l2 " << cleared.l2 << ", "
                << schedulers << " scheduler(s) told";
  return reply(200, {{"user", *user}, {"kvstore", {{"l1", cleared.l1}, {"l2", cleared.l2}}}, {"schedulers_notified", schedulers}});
}

}  // namespace tessera::frontend
