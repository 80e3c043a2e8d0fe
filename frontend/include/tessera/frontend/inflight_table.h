// The in-flight table of the hub: request id -> the sink that receives its events and the
// scheduler it was sent to.
//
// Ownership: holds a shared_ptr to each sink until the request's terminal event (FinalEvent or
// ErrorEvent) has been delivered, or until it is abandoned or failed; the sink is shared with
// whoever submitted the request. Threading: not thread-safe; owned by the hub thread (hub.h),
// which is the only thread that touches it. Sinks are called on that thread, after the entry
// was removed when the event is terminal (so a sink may re-enter the hub freely).
// Invariant: an id is in the table at most once, and only between its successful send to a
// scheduler and its terminal event.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "tessera/common/protocol.h"

namespace tessera::frontend {

// Receives the scheduler's events of one request (TokenEvent, then one FinalEvent or
// ErrorEvent), on the hub thread. Must not block.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void on_message(protocol::Message message) = 0;
};

class InflightTable {
 public:
  void add(uint64_t id, std::shared_ptr<RequestSink> sink, size_t scheduler);
  bool contains(uint64_t id) const { return entries_.count(id) != 0; }
  // The scheduler index of a request; -1 when unknown.
  int scheduler_of(uint64_t id) const;
  // Hands a scheduler's event to its sink (the entry is removed first when the event is
  // terminal). Unknown (abandoned) ids are dropped. Returns whether a sink got it.
  bool deliver(protocol::Message message);
  // Forgets a request without telling its sink; returns whether it was there.
  bool erase(uint64_t id);
  // Every request sent to `scheduler` gets ErrorEvent{code, why} and is removed. Returns how many.
  size_t fail_scheduler(size_t scheduler, ErrorCode code, const std::string& why);
  // Every request gets ErrorEvent{code, why}; the table ends empty.
  size_t fail_all(ErrorCode code, const std::string& why);
  size_t size() const { return entries_.size(); }
  // Requests in flight on `scheduler` (the load of the ring choice, scheduler_ring.h).
  int64_t count(size_t scheduler) const;

 private:
  struct Entry {
    std::shared_ptr<RequestSink> sink;
    size_t scheduler = 0;
  };
  void forget(const Entry& e);  // keeps per_scheduler_ in step with entries_

  std::unordered_map<uint64_t, Entry> entries_;
  std::unordered_map<size_t, int64_t> per_scheduler_;  // invariant: entries of each scheduler
};

}  // namespace tessera::frontend
