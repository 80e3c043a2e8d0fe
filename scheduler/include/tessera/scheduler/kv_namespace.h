// The namespace of a K/V prefix (DESIGN.md, K/V data model). Two sequences may share K/V pages
// only when their namespaces are equal field by field; nothing is ever shared across namespaces.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::scheduler {

struct KvNamespace {
  std::string model_fingerprint{};  // which weights computed the K/V
  std::string tenant_salt{};      // optional tenant isolation ("" = none)
  // Preference-injected sequences only (else empty / 0): the user, the hash of the preference
  // text, and the effective alpha (min(alpha, 0.7)) that scaled V.
  std::string user{};
  uint64_t preference_hash = 0;
  float alpha = 0.0f;

  bool operator==(const KvNamespace&) const = default;

  // An unambiguous byte encoding (length-prefixed fields; alpha by its bits): equal encodings
  // <=> equal namespaces. Used as the radix index's root key.
  std::string canonical() const;
  // hash of canonical(), the seed of routing keys.
  uint64_t hash() const;
};

}  // namespace tessera::scheduler
