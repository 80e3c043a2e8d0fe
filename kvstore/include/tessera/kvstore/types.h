// Value types shared by the kvstore's client library (client.h) and its server side (store.h),
// so that a client of the kvstore needs neither the L1 cache nor the Redis internals.
#pragma once

#include <cstdint>
#include <string_view>

namespace tessera::kvstore {

// Where a blob was found: the kvstore's memory (L1) or Redis (L2).
enum class Tier : uint8_t { kNone = 0, kL1 = 1, kL2 = 2 };
const char* tier_name(Tier t);             // "", "l1", "l2"
Tier parse_tier(std::string_view name);    // "l1" / "l2" / anything else -> kNone

// What invalidate_user / clear removed.
struct InvalidateResult {
  uint64_t l1 = 0;  // entries removed from L1
  uint64_t l2 = 0;  // keys removed from Redis
};

}  // namespace tessera::kvstore
