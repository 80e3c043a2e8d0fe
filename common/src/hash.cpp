#include "tessera/common/hash.h"

namespace tessera {

namespace {
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;
}  // namespace

uint64_t fnv1a64(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = kFnvOffset;
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

uint64_t hash_tokens(std::span<const int32_t> tokens, uint64_t seed) {
  uint64_t h = kFnvOffset ^ mix64(seed + tokens.size());
  for (int32_t t : tokens) {
    h ^= static_cast<uint32_t>(t);
    h *= kFnvPrime;
  }
  return mix64(h);
}

}  // namespace tessera
