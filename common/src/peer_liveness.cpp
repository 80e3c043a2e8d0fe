#include "tessera/common/peer_liveness.h"

#include <string>

namespace tessera {

Status LivenessConfig::validate(const char* what) const {
  if (interval.count() < 1 || dead_after <= interval) {
    return make_error(ErrorCode::kInvalidArgument,
                      std::string(what) + ": need a heartbeat interval >= 1 ms and a dead-after longer than it (got " +
                          std::to_string(interval.count()) + " ms and " + std::to_string(dead_after.count()) + " ms)");
  }
  return {};
}

}  // namespace tessera
