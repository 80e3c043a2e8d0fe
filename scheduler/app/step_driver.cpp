#include "step_driver.h"

#include <string>

#include "tessera/common/log.h"

namespace tessera::scheduler_app {
namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

void StepDriver::drive() {
  for (auto& [name, w] : workers_.all()) {
    for (int guard = 0; guard < 4 && !w.in_flight && w.batcher->has_work(); ++guard) {
      auto plan = w.batcher->step();
      if (!plan.ok()) {
        TS_LOG(kError) << "worker=" << name << " | step: " << plan.error().to_string();
        break;
      }
      if (!scheduler::needs_worker(*plan)) {
        StepResult empty;
        empty.step_id = plan->step_id;
        auto out = w.batcher->apply(empty);
        if (out.ok()) requests_.emit(*out);
        continue;
      }
      const auto now = Clock::now();
      requests_.mark_scheduled(*plan, now);
      audit(w);
      w.step_id = plan->step_id;
      w.in_flight = true;
      w.sent_at = now;
      if (kv_events_ != nullptr)
        for (const KvFill& f : plan->fills) kv_events_->preference_fill(name, f);
      sockets_.to_worker(name, protocol::StepPlanMsg{.id = plan->step_id, .plan = std::move(*plan)});
    }
  }
}

void StepDriver::on_result(WorkerEntry& w, const StepResult& result) {
  if (!w.in_flight || result.step_id != w.step_id) {
    TS_LOG(kWarn) << "worker=" << w.name << " | unexpected step_result " << result.step_id << " (waiting for "
                  << (w.in_flight ? std::to_string(w.step_id) : std::string("none")) << ")";
    return;
  }
  w.in_flight = false;
  m_.step_seconds->observe(seconds_between(w.sent_at, Clock::now()));
  m_.compute_seconds->observe(result.compute_ms / 1000.0);
  if (static_cast<int32_t>(result.error_code) != 0) {  // int32 or ErrorCode on the wire: both read the same
    TS_LOG(kWarn) << "worker=" << w.name << " | step " << result.step_id << " failed ("
                  << error_code_name(static_cast<ErrorCode>(result.error_code)) << "): " << result.error_message;
  }
  metrics::Registry& reg = *m_.registry;
  for (const FillResult& f : result.fills) {  // dki: provenance of preference K/V, for usage and metrics
    requests_.record_fill(f);
    reg.counter("tessera_scheduler_preference_fills_total", "preference K/V fills executed by workers, by source",
                {{"source", f.source}})
        .inc();
    reg.counter("tessera_scheduler_preference_kv_bytes_total",
                "preference K/V bytes fetched from the kvstore (kvstore, redis) or computed (compute)",
                {{"source", f.source}})
        .inc(static_cast<double>(f.kv_bytes));
    reg.counter("tessera_scheduler_preference_transfer_seconds_total",
                "time spent getting, decoding and copying preference K/V from the kvstore")
        .inc(f.transfer_ms / 1000.0);
  }
  auto out = w.batcher->apply(result);
  if (!out.ok()) {
    TS_LOG(kError) << "worker=" << w.name << " | apply: " << out.error().to_string();
    return;
  }
  audit(w);
  requests_.emit(*out);
}

void StepDriver::audit(const WorkerEntry& w) const {
  if (!audit_) return;
  Status st = w.batcher->check();
  TS_CHECK(st.ok()) << "worker=" << w.name << " batcher invariant broken: " << st.error().to_string();
}

}  // namespace tessera::scheduler_app
