// Stable 64-bit hashing for routing keys, radix child keys and consistent-hash ring positions.
//
// Every function here is a pure function of its input bits, identical on every platform and in
// every process: the frontend and the schedulers must compute the same routing key for the same
// request, so changing a definition reshuffles routing cluster-wide (tests pin golden values).
// Not cryptographic: never use these where an adversary chooses the input and a collision would
// leak data (kvstore keys are HMAC-signed for that reason). Thread-safe (no state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace tessera {

// FNV-1a, 64-bit, over bytes (reference vectors: "" -> 0xcbf29ce484222325, "a" -> 0xaf63dc4c8601ec8c).
uint64_t fnv1a64(const void* data, size_t size);
inline uint64_t fnv1a64(std::string_view s) { return fnv1a64(s.data(), s.size()); }

// The SplitMix64 finalizer: a bijective avalanche mix. mix64(0x9e3779b97f4a7c15) is the first
// output of SplitMix64 seeded with 0 (0xe220a8397b1dcdaf).
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Order-sensitive combination of two hashes.
inline uint64_t hash_combine(uint64_t a, uint64_t b) { return mix64(a ^ (mix64(b) + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2))); }

// Hash of a token sequence: FNV-1a over the tokens as 32-bit words, seeded, then mix64.
// Sequences of different lengths hash differently even when one is a prefix of the other.
uint64_t hash_tokens(std::span<const int32_t> tokens, uint64_t seed = 0);

// The routing key of a prompt: hash of its first min(k, size) tokens under `seed` (the seed is
// normally the hash of the request's K/V namespace). Requests that share their first k tokens
// get the same key and so land on the same scheduler/worker when load allows.
inline uint64_t prefix_routing_key(std::span<const int32_t> tokens, size_t k, uint64_t seed = 0) {
  return hash_tokens(tokens.first(tokens.size() < k ? tokens.size() : k), seed);
}

}  // namespace tessera
