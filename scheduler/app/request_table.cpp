#include "request_table.h"

#include <cstdio>

#include "tessera/common/log.h"

namespace tessera::scheduler_app {
namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string fixed1(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

void RequestTable::log_finish(uint64_t id, const TrackedRequest& r, const std::string& reason, const scheduler::Usage& u,
                              Clock::time_point now, const std::string& error) const {
  if (!log::enabled(log::kInfo)) return;
  std::vector<log::Field> f{{"req", std::to_string(id), true},
                            {"client_id", std::to_string(r.client_id), true},
                            {"worker", r.worker},
                            {"finish_reason", reason},
                            {"prompt_tokens", std::to_string(u.prompt_tokens), true},
                            {"cached_tokens", std::to_string(u.cached_prompt_tokens), true},
                            {"completion_tokens", std::to_string(u.completion_tokens), true},
                            {"queue_ms", r.was_scheduled ? fixed1(ms_between(r.arrival, r.scheduled)) : "", true},
                            {"ttft_ms", r.got_token ? fixed1(ms_between(r.arrival, r.first_token)) : "", true},
                            {"duration_ms", fixed1(ms_between(r.arrival, now)), true},
                            {"preemptions", std::to_string(u.preemptions), true},
                            {"requeues", std::to_string(r.requeues), true},
                            {"migrations", std::to_string(r.migrations), true}};
  if (!error.empty()) f.push_back({"error", error});
  log::event(log::kInfo, "finish", f);
}

void RequestTable::add(uint64_t id, TrackedRequest r) {
  by_client_[{r.frontend, r.client_id}] = id;
  requests_[id] = std::move(r);
}

TrackedRequest* RequestTable::find(uint64_t id) {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second;
}

std::optional<uint64_t> RequestTable::by_client(const std::string& frontend, uint64_t client_id) const {
  auto it = by_client_.find({frontend, client_id});
  if (it == by_client_.end()) return std::nullopt;
  return it->second;
}

std::vector<uint64_t> RequestTable::on_worker(const std::string& worker) const {
  std::vector<uint64_t> ids;
  for (const auto& [id, r] : requests_)
    if (r.worker == worker) ids.push_back(id);
  return ids;
}

std::vector<uint64_t> RequestTable::of_frontend(const std::string& frontend) const {
  std::vector<uint64_t> ids;
  for (const auto& [id, r] : requests_)
    if (r.frontend == frontend) ids.push_back(id);
  return ids;
}

std::vector<uint64_t> RequestTable::ids() const {
  std::vector<uint64_t> ids;
  ids.reserve(requests_.size());
  for (const auto& [id, r] : requests_) ids.push_back(id);
  return ids;
}

void RequestTable::mark_scheduled(const StepPlan& plan, Clock::time_point now) {
  for (const auto& s : plan.seqs) {
    auto r = requests_.find(s.request_id);
    if (r != requests_.end() && !r->second.was_scheduled) {
      r->second.was_scheduled = true;
      r->second.scheduled = now;
    }
  }
}

void RequestTable::record_fill(const FillResult& fill) {
  auto it = requests_.find(fill.request_id);
  if (it != requests_.end()) it->second.fill = fill;
}

void RequestTable::emit(const scheduler::StepOutcome& out) {
  // Prompt log-probabilities first: an event without tokens, before the request's first token.
  for (const auto& p : out.prompt_logprobs) {
    auto it = requests_.find(p.request_id);
    if (it == requests_.end()) continue;
    protocol::TokenEvent ev{.id = it->second.client_id};
    ev.prompt_logprobs = p.logprobs;
    ev.prompt_top_logprobs = p.top;
    sockets_.to_frontend(it->second.frontend, ev);
  }
  // One token event per request per step (a step samples at most one token per sequence).
  for (const auto& t : out.tokens) {
    auto it = requests_.find(t.request_id);
    if (it == requests_.end()) continue;
    TrackedRequest& r = it->second;
    if (r.frontend == kInternal) continue;
    if (!r.got_token) {
      r.got_token = true;
      r.first_token = Clock::now();
      m_.ttft_seconds->observe(ms_between(r.arrival, r.first_token) / 1000.0);
    }
    m_.generated_tokens->inc();
    if (r.original) r.generated.push_back(t.token);  // what a migration resumes after
    protocol::TokenEvent ev{.id = r.client_id, .tokens = {t.token}};
    ev.logprobs = {t.logprob};
    if (!t.top.empty()) ev.top_logprobs = {t.top};
    sockets_.to_frontend(r.frontend, ev);
  }
  for (const auto& f : out.finished) finish(f);
}

void RequestTable::finish(const scheduler::FinishEvent& f) {
  auto it = requests_.find(f.request_id);
  if (it == requests_.end()) return;
  const TrackedRequest& r = it->second;
  if (r.frontend == kInternal) {
    const bool ok = f.reason != scheduler::FinishReason::kError && f.reason != scheduler::FinishReason::kCancelled;
    internal_ends_.push_back({.job = r.client_id, .worker = r.worker, .ok = ok,
                              .message = ok ? "" : std::string(scheduler::finish_reason_name(f.reason)) + ": " + f.message});
    forget(f.request_id);
    return;
  }
  ++m_.finished_requests;
  m_.prompt_tokens->inc(f.usage.prompt_tokens);
  m_.cached_tokens->inc(f.usage.cached_prompt_tokens);
  if (m_.prompt_tokens->value() > 0) m_.hit_rate->set(m_.cached_tokens->value() / m_.prompt_tokens->value());
  m_.registry
      ->counter("tessera_scheduler_requests_total", "requests ended, by finish reason",
                {{"reason", std::string(scheduler::finish_reason_name(f.reason))}})
      .inc();
  const auto now = Clock::now();
  log_finish(f.request_id, r, std::string(scheduler::finish_reason_name(f.reason)), f.usage, now);
  if (f.reason == scheduler::FinishReason::kError) {
    fail(f.request_id, ErrorCode::kInternal, "worker '" + r.worker + "' failed the request: " + f.message, /*logged=*/true);
    return;
  }
  protocol::FinalEvent ev{.id = r.client_id};
  switch (f.reason) {
    case scheduler::FinishReason::kStop: ev.finish_reason = "stop"; break;
    case scheduler::FinishReason::kCancelled: ev.finish_reason = "cancelled"; break;
    default: ev.finish_reason = "length"; break;
  }
  ev.usage = {.prompt_tokens = f.usage.prompt_tokens,
              .completion_tokens = f.usage.completion_tokens,
              .cached_tokens = f.usage.cached_prompt_tokens,
              .reused_tokens = f.usage.reused_prompt_tokens};
  if (r.fill) {
    ev.usage.preference_source = r.fill->source;
    ev.usage.preference_kv_bytes = r.fill->kv_bytes;
    ev.usage.preference_transfer_ms = r.fill->transfer_ms;
  } else if (r.has_preference) {
    ev.usage.preference_source = "memory";
  }
  ev.timings.total_ms = ms_between(r.arrival, now);
  if (r.was_scheduled) ev.timings.queue_ms = ms_between(r.arrival, r.scheduled);
  if (r.got_token) {
    ev.timings.ttft_ms = ms_between(r.arrival, r.first_token);
    ev.timings.decode_ms = ms_between(r.first_token, now);
  }
  sockets_.to_frontend(r.frontend, ev);
  forget(f.request_id);
}

void RequestTable::fail(uint64_t id, ErrorCode code, std::string message, bool logged) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  if (it->second.frontend == kInternal) {
    internal_ends_.push_back({.job = it->second.client_id, .worker = it->second.worker, .ok = false, .message = message});
    forget(id);
    return;
  }
  if (!logged) log_finish(id, it->second, "error", {}, Clock::now(), std::string(error_code_name(code)));
  sockets_.fail_client(it->second.frontend, it->second.client_id, code, std::move(message));
  forget(id);
}

void RequestTable::forget(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  by_client_.erase({it->second.frontend, it->second.client_id});
  requests_.erase(it);
}

}  // namespace tessera::scheduler_app
