#include "tessera/frontend/admission.h"

#include <string>

namespace tessera::frontend {

Result<std::unique_ptr<Admission::Slot>> Admission::admit(int32_t scheduler_waiting) {
  if (draining())
    return make_error(ErrorCode::kUnavailable,
                      "this frontend is draining (shutting down) and takes no new requests; send them to another "
                      "frontend");
  if (scheduler_waiting >= config_.max_queued)
    return make_error(ErrorCode::kOverloaded, "scheduler queues are full (" + std::to_string(scheduler_waiting) + " waiting)");
  if (in_flight_.fetch_add(1) + 1 > config_.max_concurrent) {
    in_flight_.fetch_sub(1);
    return make_error(ErrorCode::kOverloaded, "too many concurrent requests (limit " + std::to_string(config_.max_concurrent) + ")");
  }
  return std::unique_ptr<Slot>(new Slot(this));
}

}  // namespace tessera::frontend
