#include "tessera/frontend/inflight_table.h"

#include <vector>

namespace tessera::frontend {

void InflightTable::add(uint64_t id, std::shared_ptr<RequestSink> sink, size_t scheduler) {
  auto it = entries_.find(id);
  if (it != entries_.end()) forget(it->second);
  entries_[id] = Entry{std::move(sink), scheduler};
  ++per_scheduler_[scheduler];
}

void InflightTable::forget(const Entry& e) {
  auto it = per_scheduler_.find(e.scheduler);
  if (it != per_scheduler_.end() && --it->second <= 0) per_scheduler_.erase(it);
}

int64_t InflightTable::count(size_t scheduler) const {
  auto it = per_scheduler_.find(scheduler);
  return it == per_scheduler_.end() ? 0 : it->second;
}

int InflightTable::scheduler_of(uint64_t id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? -1 : static_cast<int>(it->second.scheduler);
}

bool InflightTable::deliver(protocol::Message message) {
  const bool terminal =
      std::holds_alternative<protocol::FinalEvent>(message) || std::holds_alternative<protocol::ErrorEvent>(message) ||
      std::holds_alternative<protocol::PrefixReport>(message);
  auto it = entries_.find(protocol::message_id(message));
  if (it == entries_.end()) return false;  // abandoned or unknown
  std::shared_ptr<RequestSink> sink = it->second.sink;
  if (terminal) {
    forget(it->second);
    entries_.erase(it);
  }
  sink->on_message(std::move(message));
  return true;
}

bool InflightTable::erase(uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  forget(it->second);
  entries_.erase(it);
  return true;
}

size_t InflightTable::fail_scheduler(size_t scheduler, ErrorCode code, const std::string& why) {
  std::vector<std::pair<uint64_t, std::shared_ptr<RequestSink>>> failed;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.scheduler != scheduler) {
      ++it;
      continue;
    }
    forget(it->second);
    failed.emplace_back(it->first, std::move(it->second.sink));
    it = entries_.erase(it);
  }
  // Sinks run after the table is consistent (they may submit or cancel again).
  for (auto& [id, sink] : failed) sink->on_message(protocol::ErrorEvent{.id = id, .code = code, .message = why});
  return failed.size();
}

size_t InflightTable::fail_all(ErrorCode code, const std::string& why) {
  std::unordered_map<uint64_t, Entry> all;
  all.swap(entries_);
  per_scheduler_.clear();
  for (auto& [id, e] : all) e.sink->on_message(protocol::ErrorEvent{.id = id, .code = code, .message = why});
  return all.size();
}

}  // namespace tessera::frontend
