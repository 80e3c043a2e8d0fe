#include "worker_registry.h"

#include <algorithm>

#include "tessera/common/dki.h"

namespace tessera::scheduler_app {

WorkerRegistry::WorkerRegistry(WorkerLimits limits, LivenessConfig liveness, scheduler::Router router, SchedulerMetrics& m)
    : limits_(limits), liveness_(liveness), router_(std::move(router)), m_(m), offload_(limits.offload) {
  blend_steps_ = &m_.registry->counter(
      "tessera_scheduler_blend_steps_total",
      "CacheBlend prefill chunks planned (a prompt longer than a step's token budget is blended over several)");
  blend_fallbacks_ = &m_.registry->counter(
      "tessera_scheduler_blend_fallbacks_total",
      "requests with documents prefilled without CacheBlend (prompt log-probabilities asked, or a worker without "
      "blend_steps and a prompt longer than a step; logged)");
}

Status WorkerRegistry::admissible(const std::string& name, const protocol::RegisterWorker& reg) const {
  const std::string fp = dki::hex16(reg.model_fingerprint);
  const bool only_itself = workers_.size() == 1 && workers_.count(name) == 1;
  if (!workers_.empty() && !fingerprint_.empty() && fp != fingerprint_ && !only_itself)
    return make_error(ErrorCode::kInvalidArgument,
                      "model fingerprint " + fp + " differs from the other workers' " + fingerprint_);
  return ok_status();
}

Result<scheduler::BatcherConfig> WorkerRegistry::add(const std::string& name, const protocol::RegisterWorker& reg) {
  scheduler::BatcherConfig bc;
  bc.page_size = reg.page_size;
  bc.num_pages = reg.num_pages;
  bc.max_context = limits_.max_context > 0 ? std::min(limits_.max_context, reg.max_seq_len) : reg.max_seq_len;
  bc.max_running = limits_.max_running;
  bc.max_step_tokens = limits_.max_step_tokens > 0 ? limits_.max_step_tokens : reg.max_batch_tokens;
  bc.max_step_tokens = std::max(bc.max_step_tokens, bc.max_running);
  bc.max_waiting = limits_.max_waiting;
  bc.max_pinned_pages = limits_.max_pinned_pages;
  if (reg.eos_id >= 0) bc.eos_ids = {reg.eos_id};
  // CacheBlend over several steps only with a worker that says it can (an older one refuses a
  // blended chunk that does not sample: it gets one-step blends or plain prefills).
  bc.blend_steps = std::find(reg.capabilities.begin(), reg.capabilities.end(), "blend_steps") != reg.capabilities.end();
  auto batcher = scheduler::Batcher::create(bc);
  if (!batcher.ok()) return batcher.take_error();
  TS_TRY(router_.add_worker(name));
  if (kv_events_ != nullptr) (*batcher)->set_index_observer(kv_events_->observer_for(name));
  if (std::find(reg.capabilities.begin(), reg.capabilities.end(), "kv_offload") != reg.capabilities.end()) {
    (*batcher)->enable_offload(&offload_);
  }
  fingerprint_ = dki::hex16(reg.model_fingerprint);
  fingerprint64_ = reg.model_fingerprint;
  const std::string help = "K/V pages by state (free + held + cached = total)";
  metrics::Registry& r = *m_.registry;
  workers_.emplace(name, WorkerEntry{.name = name,
                                     .info = reg,
                                     .batcher = std::move(*batcher),
                                     .liveness = PeerLiveness(liveness_),
                                     .free_pages = &r.gauge("tessera_scheduler_pages", help, {{"worker", name}, {"state", "free"}}),
                                     .held_pages = &r.gauge("tessera_scheduler_pages", help, {{"worker", name}, {"state", "held"}}),
                                     .cached_pages = &r.gauge("tessera_scheduler_pages", help,
                                                              {{"worker", name}, {"state", "cached"}}),
                                     .pinned_pages = &r.gauge("tessera_scheduler_pinned_pages",
                                                              "K/V pages locked by pinned prefixes (docs/api.md \"Pinned prefixes\")",
                                                              {{"worker", name}})});
  return bc;
}

bool WorkerRegistry::remove(const std::string& name) {
  auto it = workers_.find(name);
  if (it == workers_.end()) return false;
  publish_counters(it->second);
  it->second.free_pages->set(0);
  it->second.held_pages->set(0);
  it->second.cached_pages->set(0);
  it->second.pinned_pages->set(0);
  (void)router_.remove_worker(name);
  workers_.erase(it);
  if (kv_events_ != nullptr) kv_events_->cleared(name);
  if (workers_.empty()) fingerprint_.clear();
  return true;
}

bool WorkerRegistry::begin_drain(const std::string& name) {
  WorkerEntry* w = find(name);
  if (w == nullptr || w->draining) return w != nullptr;
  w->draining = true;
  (void)router_.remove_worker(name);
  return true;
}

std::vector<std::string> WorkerRegistry::drained() const {
  std::vector<std::string> out;
  for (const auto& [name, w] : workers_)
    if (w.draining && !w.in_flight && w.batcher->num_running() == 0 && w.batcher->num_waiting() == 0) out.push_back(name);
  return out;
}

WorkerEntry* WorkerRegistry::find(const std::string& name) {
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : &it->second;
}

std::optional<scheduler::WorkerFacts> WorkerRegistry::facts() const {
  if (workers_.empty()) return std::nullopt;
  return scheduler::WorkerFacts{.vocab_size = workers_.begin()->second.info.vocab_size,
                                .model_fingerprint = fingerprint64_};
}

Result<scheduler::RouteDecision> WorkerRegistry::place(scheduler::Request req) {
  // Capabilities the request needs (a worker that registered without a list is assumed to have
  // all of them: an older worker).
  std::vector<std::string_view> needs = required_sampling_capabilities(req.sampling);
  if (req.preference) needs.emplace_back("kv_fill");
  if (req.kv_policy.type != KvPolicyType::kNone) needs.emplace_back("kv_policy");  // docs/kv.md
  if (!req.blend_chunks.empty()) needs.emplace_back("chunk_blend");                 // docs/kv.md "CacheBlend"
  std::string lacking;  // "worker (backend) lacks cap" for the error message
  std::vector<scheduler::WorkerSnapshot> snaps;
  snaps.reserve(workers_.size());
  for (const auto& [name, w] : workers_) {
    if (w.draining) continue;  // off the ring
    const std::vector<std::string>& has = w.info.capabilities;
    bool eligible = true;
    for (std::string_view need : needs) {
      if (has.empty() || std::find(has.begin(), has.end(), need) != has.end()) continue;
      eligible = false;
      if (lacking.size() < 512) {
        lacking += (lacking.empty() ? "" : "; ") + name + " (" + has.front() + ") lacks " + std::string(need);
      }
      break;
    }
    snaps.push_back({.name = name,
                     .load = w.batcher->load(),
                     .cached_tokens = w.batcher->cached_prefix_tokens(req),
                     .eligible = eligible});
  }
  if (snaps.empty() && !workers_.empty())
    return make_error(ErrorCode::kUnavailable, "every worker of this scheduler is draining (shutting down)");
  auto routed = router_.route(router_.routing_key(req), snaps);
  if (!routed.ok() && routed.error().code == ErrorCode::kUnsupported) {
    return make_error(ErrorCode::kUnsupported, "no live worker can serve this request: " + lacking +
                                                   " (kv_fill = preference K/V injection; the others are sampling "
                                                   "options)");
  }
  TS_ASSIGN_OR_RETURN(scheduler::RouteDecision route, std::move(routed));
  WorkerEntry& w = workers_.at(route.worker);
  TS_TRY(w.batcher->submit(std::move(req)));
  m_.registry
      ->counter("tessera_scheduler_routed_requests_total", "requests routed, by worker and deciding reason",
                {{"worker", w.name}, {"reason", route.reason == scheduler::RouteReason::kPrefix ? "prefix" : "ring"}})
      .inc();
  return route;
}

Status WorkerRegistry::place_on(const std::string& name, scheduler::Request req) {
  auto it = workers_.find(name);
  if (it == workers_.end()) return make_error(ErrorCode::kNotFound, "no worker '" + name + "' is registered");
  if (it->second.draining) return make_error(ErrorCode::kUnavailable, "worker '" + name + "' is draining");
  return it->second.batcher->submit(std::move(req));
}

std::vector<std::string> WorkerRegistry::check_dead(PeerLiveness::Clock::time_point now) {
  std::vector<std::string> dead;
  for (auto& [name, w] : workers_)
    if (w.liveness.check_dead(now)) dead.push_back(name);
  return dead;
}

void WorkerRegistry::publish() {
  int64_t running = 0, waiting = 0, free = 0, held = 0, cached = 0;
  for (auto& [name, w] : workers_) {
    publish_counters(w);
    const auto c = w.batcher->pages().counts();
    w.free_pages->set(c.free);
    w.held_pages->set(c.held);
    w.cached_pages->set(c.cached);
    w.pinned_pages->set(w.batcher->pinned_pages());
    free += c.free;
    held += c.held;
    cached += c.cached;
    running += w.batcher->num_running();
    waiting += w.batcher->num_waiting();
  }
  const auto draining = std::count_if(workers_.begin(), workers_.end(), [](const auto& kv) { return kv.second.draining; });
  m_.live_workers->set(static_cast<double>(static_cast<int64_t>(workers_.size()) - draining));
  m_.registry->gauge("tessera_scheduler_draining_workers", "workers draining: no new requests, the running ones finish")
      .set(static_cast<double>(draining));
  m_.running->set(static_cast<double>(running));
  m_.waiting->set(static_cast<double>(waiting));
  m_.pages_free = free;
  m_.pages_held = held;
  m_.pages_cached = cached;
  const int64_t total = free + held + cached;
  m_.kv_usage->set(total > 0 ? static_cast<double>(held) / static_cast<double>(total) : 0.0);
  publish_offload();
}

void WorkerRegistry::publish_counters(WorkerEntry& w) {
  const scheduler::BatcherStats& now = w.batcher->stats();
  scheduler::BatcherStats& seen = w.published;
  auto bump = [](metrics::Counter& c, int64_t now_value, int64_t& seen_value) {
    if (now_value > seen_value) c.inc(static_cast<double>(now_value - seen_value));
    seen_value = now_value;
  };
  bump(*m_.preemptions, now.preemptions, seen.preemptions);
  bump(*m_.kv_evicted, now.kv_evicted_tokens, seen.kv_evicted_tokens);
  bump(*m_.kv_compactions, now.kv_compactions, seen.kv_compactions);
  bump(*blend_steps_, now.blend_steps, seen.blend_steps);
  bump(*blend_fallbacks_, now.blend_fallbacks, seen.blend_fallbacks);
}

void WorkerRegistry::publish_offload() {
  metrics::Registry& r = *m_.registry;
  const scheduler::OffloadStats& st = offload_.stats();
  auto bump = [&](const char* name, const char* help, int64_t now, int64_t& seen) {
    metrics::Counter& c = r.counter(name, help);
    if (now > seen) c.inc(static_cast<double>(now - seen));
    seen = now;
  };
  scheduler::OffloadStats& s = offload_seen_;
  bump("tessera_scheduler_kv_offload_spilled_pages_total", "evicted radix pages planned as spills to the kvstore (K/V offload)",
       st.spilled_pages, s.spilled_pages);
  bump("tessera_scheduler_kv_offload_offloaded_pages_total", "spilled pages the workers confirmed stored in the kvstore",
       st.offloaded_pages, s.offloaded_pages);
  bump("tessera_scheduler_kv_offload_reloads_total", "admissions that reloaded a prefix continuation from the kvstore",
       st.reloads, s.reloads);
  bump("tessera_scheduler_kv_offload_reloaded_pages_total", "pages reloaded from the kvstore instead of recomputed",
       st.reloaded_pages, s.reloaded_pages);
  bump("tessera_scheduler_kv_offload_reload_missed_pages_total",
       "pages a reload asked for but the worker could not load (recomputed)", st.reload_missed_pages, s.reload_missed_pages);
  bump("tessera_scheduler_kv_offload_reloaded_tokens_total", "prompt tokens whose K/V was reloaded from the kvstore",
       st.reloaded_tokens, s.reloaded_tokens);
  bump("tessera_scheduler_kv_offload_reload_bytes_total", "encoded K/V bytes the workers fetched for reloads",
       st.reload_bytes, s.reload_bytes);
  r.gauge("tessera_scheduler_kv_offload_directory_entries", "block hashes the scheduler knows the kvstore holds (bounded)")
      .set(static_cast<double>(offload_.size()));
}

void WorkerRegistry::fill_heartbeat(protocol::Heartbeat& hb) const {
  for (const auto& [name, w] : workers_) {
    if (!w.draining) hb.live_workers += 1;  // a frontend is ready only with a worker taking requests
    // Limits a frontend passes on to its clients (docs/protocol.md): the smallest over the workers.
    const int32_t context = limits_.max_context > 0 ? std::min(limits_.max_context, w.info.max_seq_len) : w.info.max_seq_len;
    hb.context_length = hb.context_length == 0 ? context : std::min(hb.context_length, context);
    hb.page_size = w.info.page_size;
    hb.running += static_cast<int32_t>(w.batcher->num_running());
    hb.waiting += static_cast<int32_t>(w.batcher->num_waiting());
    hb.free_pages += w.batcher->pages().num_free() + w.batcher->pages().num_cached();
    const auto c = w.batcher->pages().counts();
    hb.workers.push_back({.name = name,
                          .free_pages = static_cast<int32_t>(c.free),
                          .held_pages = static_cast<int32_t>(c.held),
                          .cached_pages = static_cast<int32_t>(c.cached),
                          .running = static_cast<int32_t>(w.batcher->num_running()),
                          .waiting = static_cast<int32_t>(w.batcher->num_waiting()),
                          .prompt_tokens = w.batcher->stats().prompt_tokens,
                          .cached_prompt_tokens = w.batcher->stats().cached_prompt_tokens});
  }
}

}  // namespace tessera::scheduler_app
