// The scheduler's live requests: who asked (frontend routing id + the frontend's request id),
// where each runs, its timings, and the events that go back to the frontend.
//
// A request arriving from frontend F with id i gets an internal id (ids are unique per frontend
// only; by_client maps (F, i) back). Its sampled tokens go to F as `token` events carrying i,
// then exactly one `final` (stop / length / cancelled) or `error`, after which the entry is
// forgotten — every path that ends a request goes through finish(), fail() or forget().
//
// Invariants: every entry is in by_client under (frontend, client_id) and vice versa;
// `original` is kept for the request's life and `generated` holds exactly the tokens sent to
// the frontend, in order, so that Failover can re-queue (nothing streamed) or migrate (some
// streamed: the request resumes after them on another worker) a request whose worker died.
//
// Ownership/threading: owned by the event loop; used only by its thread. Sends through the
// borrowed Sockets; metrics into the borrowed registry.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "scheduler_metrics.h"
#include "sockets.h"
#include "tessera/scheduler/batcher.h"

namespace tessera::scheduler_app {

using Clock = std::chrono::steady_clock;

struct TrackedRequest {
  std::string frontend;  // routing id of the frontend that sent it
  uint64_t client_id = 0;
  std::string worker;    // where it is queued or running
  Clock::time_point arrival{};
  Clock::time_point scheduled{};    // first plan that carried it
  Clock::time_point first_token{};
  bool was_scheduled = false;
  bool got_token = false;
  bool has_preference = false;  // dki: no fill by the end means its pages were cached ("memory")
  std::optional<FillResult> fill;
  // The request as first submitted (Request::generated empty), so that Failover can place it
  // again if its worker dies; empty only for requests tracked without one (never re-placed).
  std::optional<scheduler::Request> original;
  std::vector<int32_t> generated;  // tokens sent to the frontend so far (a migration resumes after them)
  int requeues = 0;    // times moved before its first token
  int migrations = 0;  // times moved after it had streamed (resumed after `generated`)
};

// The end of a request the scheduler made itself: TrackedRequest::frontend is kInternal and
// client_id names the job (a pinned prefix's prewarm, prefix_pins.h). Nothing is sent for such a
// request; its end is queued for take_internal_ends().
inline const std::string kInternal;  // the empty routing id: never a real frontend's
struct InternalEnd {
  uint64_t job = 0;
  std::string worker;
  bool ok = false;      // finished normally (its prompt's K/V is computed and cached)
  std::string message;  // why not
};

class RequestTable {
 public:
  RequestTable(Sockets& sockets, SchedulerMetrics& m) : sockets_(sockets), m_(m) {}

  uint64_t next_id() { return next_id_++; }
  void add(uint64_t id, TrackedRequest r);
  TrackedRequest* find(uint64_t id);
  std::optional<uint64_t> by_client(const std::string& frontend, uint64_t client_id) const;
  bool empty() const { return requests_.empty(); }

  // Ids of the requests held by a worker / sent by a frontend / all of them.
  std::vector<uint64_t> on_worker(const std::string& worker) const;
  std::vector<uint64_t> of_frontend(const std::string& frontend) const;
  std::vector<uint64_t> ids() const;

  // Marks the requests of a plan about to be sent as scheduled (queue time ends).
  void mark_scheduled(const StepPlan& plan, Clock::time_point now);
  // Records the worker's preference-fill provenance for the request's usage.
  void record_fill(const FillResult& fill);

  // Token events to the frontends (one per request per step) and the ends of finished requests.
  void emit(const scheduler::StepOutcome& out);
  // Ends a request with its `final` (or an `error` for FinishReason::kError) and forgets it.
  void finish(const scheduler::FinishEvent& f);
  // Ends a request with an `error` and forgets it.
  // Writes its finish line (reason "error") unless `logged`.
  void fail(uint64_t id, ErrorCode code, std::string message, bool logged = false);
  // Drops a request without telling anyone.
  void forget(uint64_t id);
  // The internal requests ended since the last call.
  std::vector<InternalEnd> take_internal_ends() { return std::exchange(internal_ends_, {}); }

 private:
  // The scheduler's per-request line (docs/operations.md "Finish lines"); `error` names the code.
  void log_finish(uint64_t id, const TrackedRequest& r, const std::string& reason, const scheduler::Usage& u,
                  Clock::time_point now, const std::string& error = "") const;

  Sockets& sockets_;
  SchedulerMetrics& m_;
  std::unordered_map<uint64_t, TrackedRequest> requests_;                  // by internal id
  std::map<std::pair<std::string, uint64_t>, uint64_t> by_client_;         // (frontend, client id) -> internal
  std::vector<InternalEnd> internal_ends_;
  uint64_t next_id_ = 1;
};

}  // namespace tessera::scheduler_app
