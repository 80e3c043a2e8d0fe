#include "tessera/kvstore/types.h"

namespace tessera::kvstore {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::kNone: return "";
    case Tier::kL1: return "l1";
    case Tier::kL2: return "l2";
  }
  return "";
}

Tier parse_tier(std::string_view name) {
  if (name == "l1") return Tier::kL1;
  if (name == "l2") return Tier::kL2;
  return Tier::kNone;
}

}  // namespace tessera::kvstore
