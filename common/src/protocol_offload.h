// Private to common/: the K/V offload fields of step_plan / step_result (protocol_offload.cpp).
#pragma once

#include "msgpack_io.h"
#include "tessera/common/step_plan.h"

namespace tessera::protocol::detail {

void write_plan_offload(Writer& w, const StepPlan& p);        // "spills", "reloads" (when non-empty)
Status read_plan_offload(const MapView& m, StepPlan* p);
void write_result_offload(Writer& w, const StepResult& r);    // "reloads", "offloaded" (when non-empty)
Status read_result_offload(const MapView& m, StepResult* r);

}  // namespace tessera::protocol::detail
