// The DKI key policy (dki.h).
#include <algorithm>
#include <cmath>
#include <string>

#include "tessera/common/hash.h"
#include "tessera/common/dki.h"

namespace tessera::dki {
namespace {
constexpr std::string_view kKeyPrefix = "pref1:";
constexpr size_t kHexDigits = 16;
}  // namespace

std::optional<float> effective_alpha(float alpha) {
  if (!std::isfinite(alpha)) return std::nullopt;
  const float a = std::min(alpha, kAlphaCap);
  if (a <= kAlphaFloor) return std::nullopt;
  return a;
}

uint64_t preference_hash(std::span<const int32_t> tokens, uint64_t fingerprint) { return hash_tokens(tokens, fingerprint); }

std::string hex16(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(kHexDigits, '0');
  for (size_t i = 0; i < kHexDigits; ++i) out[kHexDigits - 1 - i] = kDigits[(v >> (4 * i)) & 0xf];
  return out;
}

std::string make_blob_key(std::string_view user, uint64_t content_hash) {
  std::string key(kKeyPrefix);
  key += hex16(content_hash);
  key += ':';
  key += user;
  return key;
}

Result<ParsedBlobKey> parse_blob_key(std::string_view key) {
  const size_t need = kKeyPrefix.size() + kHexDigits + 1;
  if (key.size() < need || key.substr(0, kKeyPrefix.size()) != kKeyPrefix || key[need - 1] != ':') {
    return make_error(ErrorCode::kInvalidArgument,
                      "preference blob_key must be \"pref1:<16 hex digits>:<user>\" (got " + std::to_string(key.size()) + " bytes)");
  }
  ParsedBlobKey out;
  for (size_t i = 0; i < kHexDigits; ++i) {
    const char c = key[kKeyPrefix.size() + i];
    uint64_t d = 0;
    if (c >= '0' && c <= '9') {
      d = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      d = static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return make_error(ErrorCode::kInvalidArgument, "preference blob_key: content hash digit " + std::to_string(i) +
                                                         " is not a lowercase hex digit");
    }
    out.content_hash = (out.content_hash << 4) | d;
  }
  out.user = std::string(key.substr(need));
  if (out.user.size() > kMaxUserBytes) {
    return make_error(ErrorCode::kInvalidArgument, "preference blob_key: user has " + std::to_string(out.user.size()) +
                                                       " bytes, at most " + std::to_string(kMaxUserBytes));
  }
  return out;
}

}  // namespace tessera::dki
