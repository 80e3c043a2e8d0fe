#include "event_loop.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "tessera/common/log.h"
#include "tessera/common/log_limit.h"

namespace tessera::scheduler_app {
namespace {

using std::chrono::milliseconds;

int64_t unix_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// This process's instance id (protocol: Heartbeat/RegisterAck `instance`): random and non-zero,
// so a peer that sees it change knows the scheduler restarted.
uint64_t new_instance_id() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(unix_ms());
  return v;
}

}  // namespace

EventLoop::EventLoop(const ServiceConfig& config, std::unique_ptr<Sockets> sockets, std::unique_ptr<KvEvents> kv_events,
                     scheduler::Router router, metrics::Registry& registry)
    : config_(config),
      instance_(new_instance_id()),
      sockets_(std::move(sockets)),
      kv_events_(std::move(kv_events)),
      m_(SchedulerMetrics::create(registry)),
      intake_(scheduler::IntakeConfig{.prefix_cache = config.prefix_cache}),
      workers_(WorkerLimits{.max_running = config.max_running,
                            .max_waiting = config.max_waiting,
                            .max_step_tokens = config.max_step_tokens,
                            .max_context = config.max_context,
                            .max_pinned_pages = config.max_pinned_pages,
                            .offload = config.kv_offload},
               LivenessConfig{.interval = milliseconds(config.heartbeat_ms), .dead_after = milliseconds(config.worker_dead_ms)},
               std::move(router), m_),
      requests_(*sockets_, m_),
      failover_(workers_, requests_, m_, config.max_migrations),
      driver_(workers_, requests_, *sockets_, m_, config.audit),
      pins_(config.name, intake_, workers_, requests_, *sockets_),
      frontend_liveness_{.interval = milliseconds(config.heartbeat_ms), .dead_after = milliseconds(config.frontend_dead_ms)},
      heartbeat_(std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count()) {
  workers_.set_kv_events(kv_events_.get());
  driver_.set_kv_events(kv_events_.get());
}

void EventLoop::run(const std::atomic<bool>& stop) {
  auto next_tick = Clock::now();
  for (;;) {
    if (stop.load() && !draining_) begin_drain();
    if (draining_ && (requests_.empty() || Clock::now() >= drain_deadline_)) break;
    zmq::pollitem_t items[] = {{sockets_->frontends().handle(), 0, ZMQ_POLLIN, 0},
                               {sockets_->workers().handle(), 0, ZMQ_POLLIN, 0},
                               {kv_events_ ? kv_events_->snapshot_socket().handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    auto wait = std::chrono::duration_cast<milliseconds>(next_tick - Clock::now());
    wait = std::clamp(wait, milliseconds(0), milliseconds(50));
    try {
      zmq::poll(items, kv_events_ ? 3 : 2, wait);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      TS_LOG(kError) << "zmq poll: " << e.what();
      break;
    }
    if (items[1].revents & ZMQ_POLLIN) read_workers();
    if (items[0].revents & ZMQ_POLLIN) read_frontends();
    driver_.drive();
    if (auto ends = requests_.take_internal_ends(); !ends.empty()) pins_.on_internal_ends(ends);
    if (Clock::now() >= next_tick) {
      tick();
      next_tick = Clock::now() + milliseconds(std::min(config_.heartbeat_ms, 250));
    }
    if (kv_events_) {
      kv_events_->flush();  // this iteration's index changes, as one message
      if (items[2].revents & ZMQ_POLLIN) kv_events_->serve_snapshots(workers_);
    }
    heartbeat_.store(std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count(),
                     std::memory_order_relaxed);
  }
  shutdown_all();
  // The last finals and errors are still queued in the socket: give them time to leave (the
  // sockets linger 0 otherwise, and a frontend would then fail those requests as lost).
  sockets_->frontends().set(zmq::sockopt::linger, 2000);
}

// ---- workers ----

void EventLoop::read_workers() {
  for (int n = 0; n < 1024; ++n) {
    auto frames = zmqu::recv(sockets_->workers(), true);
    if (!frames.ok() || frames->empty()) return;
    auto env = zmqu::parse_router(std::move(*frames));
    if (!env.ok()) {
      m_.bad_worker->inc();
      {
        static log::RateLimit limit;  // a peer can send these at will
        TS_LOG_LIMITED(kWarn, limit) << "worker socket: " << env.error().to_string();
      }
      continue;
    }
    auto msg = protocol::decode(env->body);
    if (!msg.ok()) {
      m_.bad_worker->inc();
      {
        static log::RateLimit limit;  // a peer can send these at will
        TS_LOG_LIMITED(kWarn, limit) << "worker=" << env->identity << " | undecodable message: " << msg.error().to_string();
      }
      continue;
    }
    on_worker(env->identity, std::move(*msg));
  }
}

void EventLoop::on_worker(const std::string& name, protocol::Message msg) {
  if (auto* reg = std::get_if<protocol::RegisterWorker>(&msg)) {
    on_register(name, *reg);
    return;
  }
  WorkerEntry* w = workers_.find(name);
  if (w == nullptr) return;  // not registered (e.g. we restarted): it re-registers on silence
  w->liveness.heard(Clock::now());
  if (auto* hb = std::get_if<protocol::Heartbeat>(&msg)) {
    sockets_->to_worker(name, protocol::Heartbeat{.id = hb->id, .role = "scheduler", .name = config_.name,
                                                  .unix_ms = unix_ms(), .instance = instance_});
  } else if (auto* res = std::get_if<protocol::StepResultMsg>(&msg)) {
    driver_.on_result(*w, res->result);
  } else if (std::holds_alternative<protocol::Drain>(msg)) {
    if (!w->draining) {
      workers_.begin_drain(name);
      TS_LOG(kInfo) << "worker=" << name << " | draining: no new requests; " << w->batcher->num_running() << " running and "
                    << w->batcher->num_waiting() << " waiting finish here";
      workers_.publish();
    }
    finish_drains();
  } else if (std::holds_alternative<protocol::Shutdown>(msg)) {
    failover_.worker_dead(name, "worker '" + name + "' shut down");
  } else {
    {
      static log::RateLimit limit;  // a peer can send these at will
      TS_LOG_LIMITED(kWarn, limit) << "worker=" << name << " | ignoring '" << protocol::message_type(msg) << "'";
    }
  }
}

void EventLoop::on_register(const std::string& name, const protocol::RegisterWorker& reg) {
  auto reject = [&](const std::string& why) {
    TS_LOG(kWarn) << "worker=" << name << " | registration rejected: " << why;
    sockets_->to_worker(name, protocol::RegisterAck{.id = reg.id, .accepted = false, .reason = why, .instance = instance_});
  };
  if (Status st = workers_.admissible(name, reg); !st.ok()) return reject(st.error().message);
  // A worker registering again lost its link (or restarted) and dropped all request state: its
  // old requests are orphans, re-queued once it is back (on it or another worker).
  const std::string again = "worker '" + name + "' registered again (it lost its scheduler link)";
  const std::vector<uint64_t> orphans = failover_.remove_worker(name, again);
  if (auto bc = workers_.add(name, reg); !bc.ok()) {
    reject(bc.error().message);
  } else {
    sockets_->to_worker(name, protocol::RegisterAck{.id = reg.id, .accepted = true, .heartbeat_ms = config_.heartbeat_ms,
                                                    .instance = instance_});
    TS_LOG(kInfo) << "worker=" << name << " | registered: " << reg.num_pages << " pages x " << reg.page_size << ", vocab "
                  << reg.vocab_size << ", context " << bc->max_context << ", step budget " << bc->max_step_tokens
                  << ", model " << workers_.fingerprint();
    workers_.publish();
  }
  failover_.requeue(orphans, again);
}

// ---- frontends ----

void EventLoop::read_frontends() {
  zmq::socket_t& sock = sockets_->frontends();
  for (int n = 0; n < 1024; ++n) {
    auto frames = zmqu::recv(sock, true);
    if (!frames.ok() || frames->empty()) return;
    auto env = zmqu::parse_router(std::move(*frames));
    if (!env.ok()) {
      m_.bad_frontend->inc();
      {
        static log::RateLimit limit;  // a peer can send these at will
        TS_LOG_LIMITED(kWarn, limit) << "frontend socket: " << env.error().to_string();
      }
      continue;
    }
    const auto now = Clock::now();
    if (auto it = frontends_.find(env->identity); it != frontends_.end()) {
      it->second.heard(now);
    } else {
      frontends_.emplace(env->identity, PeerLiveness(frontend_liveness_, now));
    }
    auto msg = protocol::decode(env->body);
    if (!msg.ok()) {
      m_.bad_frontend->inc();
      {
        static log::RateLimit limit;  // a peer can send these at will
        TS_LOG_LIMITED(kWarn, limit) << "frontend message: " << msg.error().to_string();
      }
      (void)zmqu::send(sock,
                       zmqu::router_reply(*env, protocol::encode_error(protocol::peek_id(env->body), msg.error().code,
                                                                       msg.error().message)),
                       true);
      continue;
    }
    on_frontend(*env, std::move(*msg));
  }
}

void EventLoop::on_frontend(const zmqu::Envelope& env, protocol::Message msg) {
  zmq::socket_t& sock = sockets_->frontends();
  if (auto* hb = std::get_if<protocol::Heartbeat>(&msg)) {
    (void)zmqu::send(sock, zmqu::router_reply(env, protocol::encode(heartbeat(hb->id))), true);
  } else if (auto* req = std::get_if<protocol::GenerateRequest>(&msg)) {
    if (env.delimiter) {  // REQ-style peers cannot take a stream of replies; refuse clearly
      (void)zmqu::send(sock,
                       zmqu::router_reply(env, protocol::encode_error(req->id, ErrorCode::kUnsupported,
                                                                      "use a DEALER socket: the scheduler streams several "
                                                                      "replies per request")),
                       true);
      return;
    }
    on_generate(env.identity, std::move(*req));
  } else if (auto* c = std::get_if<protocol::CancelRequest>(&msg)) {
    on_cancel(env.identity, c->id);
  } else if (auto* pa = std::get_if<protocol::PrefixAdmin>(&msg)) {
    pins_.on_admin(env.identity, *pa);
  } else if (auto* inv = std::get_if<protocol::InvalidateUser>(&msg)) {
    // dki: admin invalidate. The user's later requests get a new namespace epoch, so the
    // preference pages cached under the old one are never matched again (LRU evicts them).
    const uint64_t epoch = intake_.invalidate_user(inv->user);
    TS_LOG(kInfo) << "user=" << inv->user << " | preference K/V invalidated (epoch " << epoch << ")";
  } else {
    sockets_->fail_client(env.identity, protocol::message_id(msg), ErrorCode::kUnsupported,
                          "the scheduler's frontend socket does not take '" + std::string(protocol::message_type(msg)) + "'");
  }
}

protocol::Heartbeat EventLoop::heartbeat(uint64_t id) const {
  protocol::Heartbeat hb{.id = id, .role = "scheduler", .name = config_.name, .unix_ms = unix_ms(), .instance = instance_,
                         .draining = draining_};
  workers_.fill_heartbeat(hb);
  hb.totals = protocol::SchedulerTotals{.finished_requests = m_.finished_requests,
                                        .prompt_tokens = static_cast<int64_t>(m_.prompt_tokens->value()),
                                        .cached_prompt_tokens = static_cast<int64_t>(m_.cached_tokens->value()),
                                        .generation_tokens = static_cast<int64_t>(m_.generated_tokens->value()),
                                        .preemptions = static_cast<int64_t>(m_.preemptions->value()),
                                        .ttft_count = static_cast<int64_t>(m_.ttft_seconds->count()),
                                        .ttft_seconds_sum = m_.ttft_seconds->sum()};
  return hb;
}

void EventLoop::on_generate(const std::string& frontend, protocol::GenerateRequest r) {
  const uint64_t client_id = r.id;
  if (draining_) {  // sent before the frontend read our `draining` heartbeat: it submits it elsewhere
    ++drain_.refused;
    sockets_->fail_client(frontend, client_id, ErrorCode::kPeerDead,
                          "scheduler '" + config_.name + "' is draining (shutting down): submit the request to another scheduler");
    return;
  }
  if (requests_.by_client(frontend, client_id)) {
    sockets_->fail_client(frontend, client_id, ErrorCode::kInvalidArgument,
                          "request id " + std::to_string(client_id) + " is already running");
    return;
  }
  const std::optional<scheduler::WorkerFacts> facts = workers_.facts();
  if (!facts) {
    sockets_->fail_client(frontend, client_id, ErrorCode::kUnavailable,
                          "no worker is registered with scheduler '" + config_.name + "'");
    return;
  }
  if (Status st = scheduler::Intake::validate(r, *facts); !st.ok()) {  // before an id is spent on it
    sockets_->fail_client(frontend, client_id, st.error().code, st.error().message);
    return;
  }
  auto admitted = intake_.admit(std::move(r), requests_.next_id(), *facts);
  if (!admitted.ok()) {
    sockets_->fail_client(frontend, client_id, admitted.error().code, admitted.error().message);
    return;
  }
  const uint64_t id = admitted->request.id;
  std::optional<scheduler::Request> original = admitted->request;
  auto route = workers_.place(std::move(admitted->request));
  if (!route.ok()) {
    sockets_->fail_client(frontend, client_id, route.error().code, route.error().message);
    return;
  }
  requests_.add(id, TrackedRequest{.frontend = frontend,
                                   .client_id = client_id,
                                   .worker = route->worker,
                                   .arrival = Clock::now(),
                                   .has_preference = admitted->has_preference,
                                   .original = std::move(original)});
  TS_LOG(kDebug) << "req=" << id << " client=" << client_id << " worker=" << route->worker
                 << " | admitted to queue, cached prefix " << route->cached_tokens;
}

void EventLoop::on_cancel(const std::string& frontend, uint64_t client_id) {
  const std::optional<uint64_t> id = requests_.by_client(frontend, client_id);
  if (!id) return;  // unknown or already finished: nothing to answer
  if (WorkerEntry* w = workers_.find(requests_.find(*id)->worker)) {
    auto fin = w->batcher->cancel(*id);
    if (fin.ok()) {
      requests_.finish(*fin);
      return;
    }
  }
  sockets_->to_frontend(frontend, protocol::FinalEvent{.id = client_id, .finish_reason = "cancelled"});
  requests_.forget(*id);
}

// ---- periodic ----

void EventLoop::finish_drains() {
  for (const std::string& name : workers_.drained()) {
    sockets_->to_worker(name, protocol::Shutdown{.id = 1});
    TS_LOG(kInfo) << "worker=" << name << " | drained: every request done; told it to exit";
    workers_.remove(name);
    workers_.publish();
  }
}

void EventLoop::tick() {
  const auto now = Clock::now();
  finish_drains();
  for (const std::string& name : workers_.check_dead(now))
    failover_.worker_dead(name, "worker '" + name + "' stopped heartbeating (silent for more than " +
                                    std::to_string(config_.worker_dead_ms) + " ms)");
  for (auto it = frontends_.begin(); it != frontends_.end();) {
    if (!it->second.check_dead(now)) {
      ++it;
      continue;
    }
    const std::vector<uint64_t> ids = requests_.of_frontend(it->first);
    if (!ids.empty()) {
      TS_LOG(kWarn) << "frontend silent: cancelling its " << ids.size() << " requests";
    }
    for (uint64_t id : ids) {
      if (WorkerEntry* w = workers_.find(requests_.find(id)->worker)) (void)w->batcher->cancel(id);
      requests_.forget(id);
    }
    it = frontends_.erase(it);
  }
  workers_.publish();
  log_stats(now);
}

void EventLoop::log_stats(Clock::time_point now) {
  if (config_.stats_interval_s <= 0) return;
  if (last_stats_ == Clock::time_point{}) {
    last_stats_ = now;
    return;
  }
  const double elapsed = std::chrono::duration<double>(now - last_stats_).count();
  if (elapsed < config_.stats_interval_s) return;
  const double tokens = m_.generated_tokens->value();
  const double rate = (tokens - last_stats_tokens_) / elapsed;
  last_stats_ = now;
  last_stats_tokens_ = tokens;
  char hit[32], tps[32], usage[32];
  std::snprintf(hit, sizeof hit, "%.3f", m_.hit_rate->value());
  std::snprintf(tps, sizeof tps, "%.1f", rate);
  std::snprintf(usage, sizeof usage, "%.3f", m_.kv_usage->value());
  log::event(log::kInfo, "stats",
             {{"scheduler", config_.name},
              {"workers", std::to_string(static_cast<int64_t>(m_.live_workers->value())), true},
              {"running", std::to_string(static_cast<int64_t>(m_.running->value())), true},
              {"waiting", std::to_string(static_cast<int64_t>(m_.waiting->value())), true},
              {"pages_free", std::to_string(m_.pages_free), true},
              {"pages_held", std::to_string(m_.pages_held), true},
              {"pages_cached", std::to_string(m_.pages_cached), true},
              {"kv_usage", usage, true},
              {"prefix_hit_rate", hit, true},
              {"gen_tokens_per_s", tps, true}});
}

void EventLoop::begin_drain() {
  draining_ = true;
  drain_.drained = true;
  drain_deadline_ = Clock::now() + std::chrono::seconds(config_.drain_timeout_s);
  // Sent before any refusal on the same socket, so each frontend has taken us out of its ring
  // when it reads the first one (docs/protocol.md "Heartbeats and failure").
  for (const auto& [frontend, liveness] : frontends_) sockets_->to_frontend(frontend, heartbeat(0));
  int handed_back = 0;
  for (uint64_t id : requests_.ids()) {
    TrackedRequest* r = requests_.find(id);
    if (r == nullptr || r->was_scheduled) continue;  // running: it finishes here
    if (WorkerEntry* w = workers_.find(r->worker)) (void)w->batcher->cancel(id);
    requests_.fail(id, ErrorCode::kPeerDead,
                   "scheduler '" + config_.name + "' is draining (shutting down); the request had not started");
    ++handed_back;
  }
  drain_.handed_back = handed_back;
  drain_.running = static_cast<int>(requests_.ids().size());
  workers_.publish();
  TS_LOG(kInfo) << "stop: draining; " << handed_back << " queued requests handed back to their frontends, "
                << requests_.ids().size() << " running finish here (up to --drain-timeout-s " << config_.drain_timeout_s
                << " s)";
}

void EventLoop::shutdown_all() {
  drain_.left = static_cast<int>(requests_.ids().size());
  if (!requests_.empty()) {
    TS_LOG(kWarn) << "drain timeout: " << requests_.ids().size() << " requests still live end with peer_dead";
  }
  for (uint64_t id : requests_.ids())
    requests_.fail(id, ErrorCode::kPeerDead, "scheduler '" + config_.name + "' is shutting down");
}

}  // namespace tessera::scheduler_app
