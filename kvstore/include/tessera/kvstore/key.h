// Blob keys and their signed Redis form.
//
// A blob is named by (model fingerprint, user/namespace, content hash). Users never share
// entries, even for equal content hashes: the user is part of every key in every tier.
//
// Redis (L2) names and values are derived with HMAC-SHA256 under a server-side secret, so a
// party without the secret can neither guess where a user's blob lives nor forge a value:
//   canonical(key) = "v1|" + hex16(fingerprint) + "|" + dec(len(user)) + ":" + user + "|" + hash
//   redis key      = "tessera:pref_kv:"     + hex(HMAC(secret, "key|" + canonical(key)))
//   user index     = "tessera:pref_kv_idx:" + hex(HMAC(secret, "idx|" + dec(len(user)) + ":" + user))
//                    (a Redis set of the user's redis keys, for invalidate_user)
//   value          = "TKVM" | u8 version (1) | 32-byte MAC | blob
//   MAC            = HMAC(secret, "mac|" + canonical(key) + "|" + blob)
// The length prefix makes the field encoding unambiguous; the MAC binds the value to its key,
// so a value copied under another user's key is rejected as well.
//
// KeySigner is immutable after construction and safe to use from many threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/common/dki.h"
#include "tessera/common/result.h"

namespace tessera::kvstore {

inline constexpr size_t kMaxUserBytes = dki::kMaxUserBytes;
inline constexpr size_t kMaxHashBytes = 128;
inline constexpr std::string_view kRedisKeyPrefix = "tessera:pref_kv:";
inline constexpr std::string_view kRedisIndexPrefix = "tessera:pref_kv_idx:";

struct BlobKey {
  uint64_t fingerprint = 0;  // model fingerprint; must be non-zero
  std::string user;          // 1..256 bytes, any bytes
  std::string hash;          // content hash of the preference, 1..128 bytes (opaque)
  bool operator==(const BlobKey&) const = default;
};

// kInvalidArgument naming the field when a key is unusable (empty user means "do not cache"
// in DKI, so the kvstore refuses it).
Status validate_key(const BlobKey& key);
std::string validate_user(std::string_view user);  // "" when fine, else the problem
std::string canonical_key(const BlobKey& key);
std::string to_hex(const uint8_t* data, size_t len);

using Mac = std::array<uint8_t, 32>;

class KeySigner {
 public:
  explicit KeySigner(std::string secret) : secret_(std::move(secret)) {}

  std::string redis_key(const BlobKey& key) const;
  std::string user_index_key(std::string_view user) const;
  Mac value_mac(const BlobKey& key, std::string_view blob) const;
  // Builds the Redis value for blob under key.
  std::string seal(const BlobKey& key, std::string_view blob) const;
  // Checks a Redis value and returns the blob. kPermissionDenied when the MAC does not match
  // (tampered, or moved from another key); kCorruptFile when the framing is wrong.
  Result<std::string> open(const BlobKey& key, std::string_view value) const;

 private:
  std::string secret_;
};

}  // namespace tessera::kvstore
