// The DKI (preference K/V injection) key policy, shared by every process that builds or serves
// a preference fill: the alpha rule, the content hash, the blob-key format and the user-id
// limit (DESIGN.md "Preference K/V injection (DKI)"; docs/preference.md). The frontend and the
// scheduler decide with these; the worker's injector and the kvstore check with them. Pure
// functions, thread-safe; no dependency beyond tessera_common.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tessera/common/result.h"

namespace tessera::dki {

inline constexpr float kAlphaCap = 0.7f;    // effective alpha = min(alpha, cap)
inline constexpr float kAlphaFloor = 0.1f;  // effective alpha <= floor: no injection
inline constexpr size_t kMaxUserBytes = 256;  // a user id longer than this is refused everywhere

// min(alpha, 0.7), or nullopt when that is <= 0.1 (or not finite): run without injection.
std::optional<float> effective_alpha(float alpha);

// Stable 64-bit content hash of a preference: hash_tokens(tokens, seed = model fingerprint).
uint64_t preference_hash(std::span<const int32_t> tokens, uint64_t fingerprint);

// The KvFill blob_key: "pref1:" + 16 lowercase hex digits of the content hash + ":" + user
// (user = any bytes, possibly empty = do not cache). parse_blob_key is its inverse and names
// what is wrong with a malformed key.
std::string make_blob_key(std::string_view user, uint64_t content_hash);
struct ParsedBlobKey {
  std::string user;
  uint64_t content_hash = 0;
};
Result<ParsedBlobKey> parse_blob_key(std::string_view blob_key);

// 16 lowercase hex digits, most significant first.
std::string hex16(uint64_t v);

}  // namespace tessera::dki
