// Admin endpoints: see admin.h.
#include "admin.h"

#include "prefix_admin.h"

#include <nlohmann/json.hpp>
#include <openssl/crypto.h>
#include <optional>

#include "tessera/common/log.h"
#include "tessera/common/metrics.h"
#include "tessera/frontend/hub.h"
#include "tessera/frontend/openai.h"
#include "tessera/frontend/stored_preferences.h"
#include "tessera/kvstore/client.h"

namespace tessera::frontend {

using json = nlohmann::json;

namespace {

AdminReply reply(int status, const json& body) { return {status, body.dump(-1, ' ', false, json::error_handler_t::replace)}; }
AdminReply fail(int status, const Error& e) { return {status, error_json(e, "", "", status)}; }

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

AdminApi::AdminApi(std::string token, bool kvstore, Hub& hub, metrics::Registry& registry)
    : token_(std::move(token)), kvstore_(kvstore), hub_(hub), registry_(registry) {}

std::variant<AdminReply, AdminApi::Call, PrefixCall> AdminApi::route(std::string_view method, std::string_view path,
                                                                     std::string_view token, const std::string& body,
                                                                     std::string_view query) const {
  if (token_.empty())
    return fail(403, make_error(ErrorCode::kPermissionDenied,
                                "admin endpoints are disabled: start tessera-frontend with --admin-token (or TESSERA_ADMIN_TOKEN)"));
  if (token.size() != token_.size() || CRYPTO_memcmp(token.data(), token_.data(), token.size()) != 0)
    return fail(401, make_error(ErrorCode::kPermissionDenied,
                                "missing or wrong admin token (send 'Authorization: Bearer <token>')"));
  if (path == "/admin/v1/drain") {
    if (method != "POST")
      return fail(405, make_error(ErrorCode::kInvalidArgument, "method " + std::string(method) + " is not allowed on " + std::string(path)));
    const bool started = drain_ && drain_();
    return reply(202, json{{"draining", true}, {"started", started}});
  }
  if (path == "/admin/v1/prefixes" || path.substr(0, 19) == "/admin/v1/prefixes/") {
    auto call = parse_prefix_call(method, path, query, body);
    if (auto* r = std::get_if<AdminReply>(&call)) return std::move(*r);
    return std::get<PrefixCall>(std::move(call));
  }
  // /admin/v1/users/{user}/{preference|invalidate}
  constexpr std::string_view kPrefix = "/admin/v1/users/";
  const bool under_users = path.substr(0, kPrefix.size()) == kPrefix;
  const std::string_view rest = under_users ? path.substr(kPrefix.size()) : std::string_view();
  const size_t slash = rest.rfind('/');
  if (!under_users || slash == std::string_view::npos || slash == 0)
    return fail(404, make_error(ErrorCode::kNotFound, "unknown admin route " + std::string(path) +
                                                          " (routes: /admin/v1/users/{user}/preference, /admin/v1/users/{user}/invalidate, "
                                                          "/admin/v1/prefixes, /admin/v1/drain)"));
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
  if (!kvstore_)
    return fail(503, make_error(ErrorCode::kUnavailable,
                                "no kvstore configured: start tessera-frontend with --kvstore ENDPOINT (or TESSERA_FRONTEND_KVSTORE)"));
  return Call{.method = std::string(method), .user = std::move(*user), .preference = pref, .body = body};
}

AdminReply AdminApi::run(const Call& call, kvstore::Client& kv) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string& user = call.user;
  auto kv_fail = [](const Error& e) { return fail(e.code == ErrorCode::kInvalidArgument ? 400 : 503, e); };

  if (call.preference && call.method == "GET") {
    auto got = StoredPreferences::load(kv, user);
    if (!got.ok()) return kv_fail(got.error());
    if (!got->has_value()) return fail(404, make_error(ErrorCode::kNotFound, "user '" + user + "' has no stored preference"));
    return reply(200, {{"user", user}, {"preference", (*got)->preference}, {"alpha", (*got)->alpha}});
  }
  if (call.preference && call.method == "PUT") {
    json j = json::parse(call.body, nullptr, false);
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
    auto put = StoredPreferences::store(kv, user, {text, alpha});
    if (!put.ok()) return kv_fail(put.error());
    return reply(200, {{"user", user}, {"preference", text}, {"alpha", alpha}, {"stored", {{"l1", put->l1}, {"l2", put->l2}}}});
  }
  if (call.preference && call.method == "DELETE") {
    auto removed = StoredPreferences::remove(kv, user);
    if (!removed.ok()) return kv_fail(removed.error());
    return reply(200, {{"user", user}, {"deleted", *removed}});
  }
  // POST invalidate: every tier of the user's preference K/V. invalidate_user also removes the
  // stored preference text (same user partition), so it is read first and put back.
  auto stored = StoredPreferences::load(kv, user);
  if (!stored.ok()) return kv_fail(stored.error());
  auto inv = kv.invalidate_user(user);
  if (!inv.ok()) return kv_fail(inv.error());
  const kvstore::InvalidateResult cleared = *inv;
  if (stored->has_value()) {
    auto put = StoredPreferences::store(kv, user, **stored);
    if (!put.ok()) return kv_fail(put.error());
  }
  const size_t schedulers = hub_.broadcast(protocol::encode(protocol::InvalidateUser{.id = hub_.next_id(), .user = user}));
  registry_.counter("tessera_frontend_admin_invalidations_total", "users invalidated through POST /admin/v1/users/{user}/invalidate").inc();
  TS_LOG(kInfo) << "user=" << user << " | invalidated: kvstore l1 " << cleared.l1 << ", l2 " << cleared.l2 << ", "
                << schedulers << " scheduler(s) told";
  return reply(200, {{"user", user}, {"kvstore", {{"l1", cleared.l1}, {"l2", cleared.l2}}}, {"schedulers_notified", schedulers}});
}

}  // namespace tessera::frontend
