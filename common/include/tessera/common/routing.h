// The routing-key policy: one definition for the frontend (which scheduler) and the scheduler
// (which worker), so both tiers agree on which requests belong together.
//
// A request's routing key is, in order of precedence:
//   1. the client's `routing_key` field, verbatim (a session or conversation id);
//   2. "user:<user>" when the request names a user (its preference K/V lives with that user);
//   3. "prefix:<16 hex digits>" — prefix_routing_key() of the first kRoutingPrefixTokens prompt
//      tokens, so requests sharing a system prompt land where its K/V is cached.
// The frontend fills the wire field `routing_key` with this string; the scheduler hashes the
// field (routing_hash) and never recomputes a different key. Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tessera {

inline constexpr size_t kRoutingPrefixTokens = 64;

// The routing key string of a request (see above).
std::string routing_key_for(std::string_view client_key, std::string_view user, std::span<const int32_t> prompt,
                            size_t prefix_tokens = kRoutingPrefixTokens);

// Position of a routing key on a consistent-hash ring, scoped by `seed` (the scheduler passes
// its K/V tenant salt so tenants never share ring positions by construction; 0 otherwise).
uint64_t routing_hash(std::string_view key, uint64_t seed = 0);

}  // namespace tessera
