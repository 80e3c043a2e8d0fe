#include "tessera/scheduler/kv_namespace.h"

#include <bit>

#include "tessera/common/hash.h"

namespace tessera::scheduler {

namespace {
void append_field(std::string& out, const std::string& s) {
  out += std::to_string(s.size());
  out += ':';
  out += s;
}
}  // namespace

std::string KvNamespace::canonical() const {
  std::string out;
  out.reserve(model_fingerprint.size() + tenant_salt.size() + user.size() + 48);
  append_field(out, model_fingerprint);
  append_field(out, tenant_salt);
  append_field(out, user);
  out += std::to_string(preference_hash);
  out += ':';
  out += std::to_string(std::bit_cast<uint32_t>(alpha));
  return out;
}

uint64_t KvNamespace::hash() const { return fnv1a64(canonical()); }

}  // namespace tessera::scheduler
