#include "tessera/frontend/api_keys.h"

#include <openssl/sha.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "tessera/common/dki.h"

namespace tessera::frontend {

namespace {

bool valid_tenant(std::string_view t) {
  if (t.empty() || t.size() > protocol::kMaxTenantBytes) return false;
  for (char c : t)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

std::vector<std::string_view> split_ws(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

AuthFailure invalid_key(std::string message) { return {401, "invalid_api_key", std::move(message)}; }

}  // namespace

size_t ApiKeys::DigestHash::operator()(const Digest& d) const {
  size_t h = 0;
  std::memcpy(&h, d.data(), sizeof h);
  return h;
}

ApiKeys::Digest ApiKeys::digest(std::string_view key) {
  Digest d{};
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), d.data());
  return d;
}

Status ApiKeys::add(std::string_view key, Principal p, std::string_view where) {
  if (key.empty()) return make_error(ErrorCode::kInvalidArgument, std::string(where) + ": an API key must not be empty");
  if (!by_digest_.emplace(digest(key), std::move(p)).second)
    return make_error(ErrorCode::kInvalidArgument, std::string(where) + ": this API key is given twice");
  return ok_status();
}

Result<ApiKeys> ApiKeys::parse(std::string_view text, std::string_view origin) {
  ApiKeys keys;
  TS_TRY(keys.parse_into(text, origin));
  return keys;
}

Status ApiKeys::parse_into(std::string_view text, std::string_view origin) {
  ApiKeys& keys = *this;
  size_t line_no = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string where = std::string(origin) + " line " + std::to_string(line_no);
    auto fields = split_ws(line);
    if (fields.empty() || fields[0].front() == '#') {
      if (end == text.size()) break;
      continue;
    }
    if (fields.size() < 2)
      return make_error(ErrorCode::kInvalidArgument, where + ": expected '<key> <tenant> [<user>,...|*]' (no tenant)");
    if (fields.size() > 3)
      return make_error(ErrorCode::kInvalidArgument,
                        where + ": expected '<key> <tenant> [<user>,...|*]' (" + std::to_string(fields.size()) + " fields)");
    if (!valid_tenant(fields[1]))
      return make_error(ErrorCode::kInvalidArgument, where + ": tenant '" + std::string(fields[1].substr(0, 64)) +
                                                         "' must be 1-128 characters of A-Z a-z 0-9 . _ -");
    Principal p{.tenant = std::string(fields[1]), .any_user = false, .users = {}};
    if (fields.size() == 3) {
      if (fields[2] == "*") {
        p.any_user = true;
      } else {
        std::string_view list = fields[2];
        size_t s = 0;
        while (s <= list.size()) {
          size_t comma = list.find(',', s);
          if (comma == std::string_view::npos) comma = list.size();
          std::string_view user = list.substr(s, comma - s);
          if (user.empty()) return make_error(ErrorCode::kInvalidArgument, where + ": an empty user in the user list");
          if (user == "*") return make_error(ErrorCode::kInvalidArgument, where + ": '*' must stand alone (any user)");
          if (user.size() > dki::kMaxUserBytes)
            return make_error(ErrorCode::kInvalidArgument,
                              where + ": a user has " + std::to_string(user.size()) + " bytes, at most " + std::to_string(dki::kMaxUserBytes));
          p.users.emplace(user);
          s = comma + 1;
        }
      }
    }
    TS_TRY(keys.add(fields[0], std::move(p), where));
    if (end == text.size()) break;
  }
  return ok_status();
}

Result<ApiKeys> ApiKeys::create(const FrontendConfig& config) {
  ApiKeys keys;
  if (!config.api_keys_file.empty()) {
    std::ifstream in(config.api_keys_file, std::ios::binary);
    if (!in) return make_error(ErrorCode::kIoError, "cannot open --api-keys-file " + config.api_keys_file);
    std::stringstream ss;
    ss << in.rdbuf();
    TS_TRY(keys.parse_into(ss.str(), config.api_keys_file));
  }
  if (!config.api_key.empty()) TS_TRY(keys.add(config.api_key, Principal{}, "--api-key"));
  return keys;
}

std::variant<Principal, AuthFailure> ApiKeys::authenticate(std::string_view key) const {
  if (!enabled()) return Principal{};
  if (key.empty()) return invalid_key("an API key is required (HTTP: 'Authorization: Bearer <key>'; ZeroMQ: the api_key field)");
  auto it = by_digest_.find(digest(key));
  if (it == by_digest_.end()) return invalid_key("invalid API key");
  return it->second;
}

std::variant<Principal, AuthFailure> ApiKeys::authenticate_header(std::optional<std::string_view> authorization) const {
  if (!enabled()) return Principal{};
  if (!authorization) return authenticate("");
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization->substr(0, kBearer.size()) != kBearer)
    return invalid_key("the Authorization header must be 'Bearer <key>'");
  return authenticate(authorization->substr(kBearer.size()));
}

std::optional<AuthFailure> ApiKeys::authorize(const Principal& p, protocol::GenerateRequest& r) {
  r.api_key.clear();
  r.tenant = p.tenant;
  if (p.may_act_for(r.user)) return std::nullopt;
  std::string shown = r.user.size() > 64 ? r.user.substr(0, 64) + "..." : r.user;
  return AuthFailure{403, "user_not_allowed", "this API key may not act for user '" + shown + "'"};
}

}  // namespace tessera::frontend
