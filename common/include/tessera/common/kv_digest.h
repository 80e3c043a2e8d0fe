// Cryptographic names of K/V content, for every place that reuses K/V found by a 64-bit hash.
//
// The 64-bit hashes of hash.h (block hashes, chunk keys) are fast names, not proofs: FNV-1a and
// mix64 are invertible, so a client who knows another namespace's key can craft a colliding
// prefix, and any two of 2^32 prefixes collide by chance. Whatever loads K/V by such a hash
// (the K/V offload reload) therefore also compares a KvTag: 96 bits of a SHA-256 chain over the
// namespace key and every token of the prefix. Finding a second prefix with a given tag costs
// about 2^96 SHA-256 evaluations, and a chance collision has probability 2^-96 per pair.
//
// The chain (docs/kv.md "K/V offload to the kvstore", "Consistency"):
//   d(-1) = SHA-256("tessera-kv-prefix-v1" || 0x00 || namespace key)
//   d(i)  = SHA-256(d(i - 1) || tokens of page i, each as a little-endian int32)
//   tag(i) = the first 12 bytes of d(i)
// strong_hash64(domain, s) = the first 8 bytes of SHA-256(domain || 0x00 || s), big-endian: a
// 64-bit name whose second preimage costs about 2^64 SHA-256 evaluations (unlike fnv1a64's
// 2^32-per-side meet in the middle).
//
// Pure functions and value types, except the process-wide secret of kv_name_hash (set once at
// start-up, read-only afterwards) and the pages_added() counter (atomic); thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "tessera/common/step_plan.h"

namespace tessera {

class KvPrefixDigest {
 public:
  explicit KvPrefixDigest(std::string_view ns_key);
  // Extends the chain by one page (any number of tokens; a page of the pool in practice).
  void add_page(std::span<const int32_t> tokens);
  // The tag of the prefix so far (the last page added).
  KvTag tag() const;
  // Pages added by every KvPrefixDigest of this process since start (relaxed atomic counter, for
  // tests and diagnostics: how often K/V content is hashed, e.g. once per page on the spill path).
  static uint64_t pages_added();

 private:
  std::array<uint8_t, 32> d_{};
};

uint64_t strong_hash64(std::string_view domain, std::string_view s);

// Keyed 64-bit names of K/V namespaces (the radix index's namespace hash, which every block hash
// chains from, and the CacheBlend salt): with the per-cluster secret set, the first 8 bytes
// (big-endian) of HMAC-SHA256(secret, "tessera-kv-names-v1" || 0x00 || domain || 0x00 || s), so
// no client can compute the name of any namespace — its own included — nor any block hash. Before
// a secret is set: strong_hash64(domain, s) (what unit tests and tools without one get).
uint64_t kv_name_hash(std::string_view domain, std::string_view s);

// Sets the secret of kv_name_hash, once per process, before any name is computed (the scheduler
// does it at start-up from its CURVE secret key, or random bytes under --insecure:
// docs/security.md). A later call changes nothing and returns false: names already computed (a
// radix index recomputes its namespace hashes) must never change. Thread-safe.
bool set_kv_name_secret(std::string_view secret);

}  // namespace tessera
