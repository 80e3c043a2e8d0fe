#include "tessera/kvstore/key.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>

#include <cstring>
#include <initializer_list>

namespace tessera::kvstore {
namespace {

constexpr char kValueMagic[4] = {'T', 'K', 'V', 'M'};
constexpr size_t kValueHeader = 4 + 1 + 32;

// HMAC-SHA256 over the concatenation of parts, without concatenating them.
Mac hmac(std::string_view secret, std::initializer_list<std::string_view> parts) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  TS_CHECK(mac != nullptr) << "OpenSSL has no HMAC";
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  TS_CHECK(ctx != nullptr);
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  TS_CHECK(EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), params) == 1);
  for (std::string_view p : parts) {
    TS_CHECK(EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(p.data()), p.size()) == 1);
  }
  Mac out{};
  size_t len = 0;
  TS_CHECK(EVP_MAC_final(ctx, out.data(), &len, out.size()) == 1 && len == out.size());
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  return out;
}

std::string length_prefixed(std::string_view s) { return std::to_string(s.size()) + ":" + std::string(s); }

}  // namespace

std::string to_hex(const uint8_t* data, size_t len) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (size_t i = 0; i < len; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xF];
  }
  return out;
}

std::string validate_user(std::string_view user) {
  if (user.empty()) return "user must not be empty (an empty user is never cached)";
  if (user.size() > kMaxUserBytes) {
    return "user is " + std::to_string(user.size()) + " bytes (max " + std::to_string(kMaxUserBytes) + ")";
  }
  return {};
}

Status validate_key(const BlobKey& key) {
  if (key.fingerprint == 0) return make_error(ErrorCode::kInvalidArgument, "fingerprint must be non-zero");
  if (std::string problem = validate_user(key.user); !problem.empty()) {
    return make_error(ErrorCode::kInvalidArgument, std::move(problem));
  }
  if (key.hash.empty() || key.hash.size() > kMaxHashBytes) {
    return make_error(ErrorCode::kInvalidArgument, "hash must be 1.." + std::to_string(kMaxHashBytes) +
                                                       " bytes (got " + std::to_string(key.hash.size()) + ")");
  }
  return ok_status();
}

std::string canonical_key(const BlobKey& key) {
  uint8_t fp[8];
  for (int i = 0; i < 8; ++i) fp[i] = static_cast<uint8_t>(key.fingerprint >> (56 - 8 * i));
  return "v1|" + to_hex(fp, 8) + "|" + length_prefixed(key.user) + "|" + key.hash;
}

std::string KeySigner::redis_key(const BlobKey& key) const {
  const Mac m = hmac(secret_, {"key|", canonical_key(key)});
  return std::string(kRedisKeyPrefix) + to_hex(m.data(), m.size());
}

std::string KeySigner::user_index_key(std::string_view user) const {
  const Mac m = hmac(secret_, {"idx|", length_prefixed(user)});
  return std::string(kRedisIndexPrefix) + to_hex(m.data(), m.size());
}

Mac KeySigner::value_mac(const BlobKey& key, std::string_view blob) const {
  return hmac(secret_, {"mac|", canonical_key(key), "|", blob});
}

std::string KeySigner::seal(const BlobKey& key, std::string_view blob) const {
  const Mac m = value_mac(key, blob);
  std::string out;
  out.reserve(kValueHeader + blob.size());
  out.append(kValueMagic, 4);
  out.push_back(1);
  out.append(reinterpret_cast<const char*>(m.data()), m.size());
  out.append(blob);
  return out;
}

Result<std::string> KeySigner::open(const BlobKey& key, std::string_view value) const {
  if (value.size() < kValueHeader || std::memcmp(value.data(), kValueMagic, 4) != 0 || value[4] != 1) {
    return make_error(ErrorCode::kCorruptFile, "redis value for this key is not a sealed kv blob");
  }
  const std::string_view blob = value.substr(kValueHeader);
  const Mac m = value_mac(key, blob);
  if (CRYPTO_memcmp(m.data(), value.data() + 5, m.size()) != 0) {
    return make_error(ErrorCode::kPermissionDenied, "redis value MAC does not match its key (tampered or moved)");
  }
  return std::string(blob);
}

}  // namespace tessera::kvstore
