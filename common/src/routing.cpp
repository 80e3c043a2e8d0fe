#include "tessera/common/routing.h"

#include <cstdio>

#include "tessera/common/hash.h"

namespace tessera {

std::string routing_key_for(std::string_view client_key, std::string_view user, std::span<const int32_t> prompt,
                            size_t prefix_tokens) {
  if (!client_key.empty()) return std::string(client_key);
  if (!user.empty()) return "user:" + std::string(user);
  char key[32];
  std::snprintf(key, sizeof key, "prefix:%016llx",
                static_cast<unsigned long long>(prefix_routing_key(prompt, prefix_tokens)));
  return key;
}

uint64_t routing_hash(std::string_view key, uint64_t seed) { return hash_combine(seed, fnv1a64(key)); }

}  // namespace tessera
