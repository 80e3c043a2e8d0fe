#include "tessera/frontend/hub.h"

#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "tessera/common/hash.h"
#include "tessera/common/hash_ring.h"
#include "tessera/common/log.h"

namespace tessera::frontend {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::Message;

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct Hub::Impl {
  struct Scheduler {
    std::string endpoint;
    std::unique_ptr<zmq::socket_t> socket;
    Clock::time_point last_seen{};
    bool alive = false;
    protocol::Heartbeat last;
    uint64_t instance = 0;  // from its heartbeats; 0 = not seen yet (or an old scheduler)
    metrics::Gauge* up = nullptr;
    // Per worker of this scheduler (from its heartbeats): pages free/held/cached, requests
    // running/waiting. A worker missing from the last heartbeat (or a dead scheduler) reads 0.
    struct WorkerGauges {
      metrics::Gauge *free, *held, *cached, *running, *waiting;
    };
    std::map<std::string, WorkerGauges> worker_gauges;
  };
  struct InFlight {
    std::shared_ptr<RequestSink> sink;
    size_t scheduler = 0;
  };

  Hub* hub = nullptr;
  HubConfig config;
  ClientHandler on_client;
  zmq::context_t ctx{1};
  zmq::socket_t wake_pull{ctx, zmq::socket_type::pull};
  std::unique_ptr<zmq::socket_t> router;
  std::vector<Scheduler> schedulers;  // hub thread only
  std::unordered_map<uint64_t, InFlight> inflight;  // hub thread only
  HashRing ring;                                     // usable schedulers; hub thread only
  std::unordered_map<std::string, size_t> index_of;  // endpoint -> schedulers index
  std::thread thread;
  std::atomic<bool> stopping{false};

  std::mutex mu;  // guards commands and wake_push
  std::deque<std::function<void()>> commands;
  zmq::socket_t wake_push{ctx, zmq::socket_type::push};

  mutable std::mutex status_mu;
  std::vector<SchedulerStatus> status;  // GUARDED_BY(status_mu)

  metrics::Registry* registry = nullptr;
  metrics::Counter* bad_from_scheduler = nullptr;
  metrics::Counter* bad_from_client = nullptr;
  metrics::Counter* peer_dead_failures = nullptr;

  void post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu);
    commands.push_back(std::move(fn));
    (void)wake_push.send(zmq::const_buffer("", 0), zmq::send_flags::dontwait);
  }

  void run() {
    auto next_beat = Clock::now();
    uint64_t beat_seq = 0;
    std::vector<zmq::pollitem_t> items;
    while (!stopping.load()) {
      items.clear();
      items.push_back({wake_pull.handle(), 0, ZMQ_POLLIN, 0});
      if (router) items.push_back({router->handle(), 0, ZMQ_POLLIN, 0});
      for (auto& s : schedulers) items.push_back({s.socket->handle(), 0, ZMQ_POLLIN, 0});
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - Clock::now());
      if (wait.count() < 0) wait = std::chrono::milliseconds(0);
      try {
        zmq::poll(items.data(), items.size(), wait);
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) break;
        TS_LOG(kWarn) << "zmq poll: " << e.what();
        continue;
      }
      size_t k = 0;
      if (items[k++].revents & ZMQ_POLLIN) drain_commands();
      if (router) {
        if (items[k++].revents & ZMQ_POLLIN) read_clients();
      }
      for (size_t i = 0; i < schedulers.size(); ++i)
        if (items[k + i].revents & ZMQ_POLLIN) read_scheduler(i);
      if (Clock::now() >= next_beat) {
        heartbeat(++beat_seq);
        next_beat = Clock::now() + std::chrono::milliseconds(config.heartbeat_ms);
      }
    }
    // Shutting down: nobody will answer the in-flight requests.
    for (auto& [id, f] : inflight)
      f.sink->on_message(protocol::ErrorEvent{.id = id, .code = ErrorCode::kUnavailable, .message = "frontend is shutting down"});
    inflight.clear();
  }

  void drain_commands() {
    zmq::message_t m;
    while (wake_pull.recv(m, zmq::recv_flags::dontwait)) {
    }
    std::deque<std::function<void()>> todo;
    {
      std::lock_guard<std::mutex> lock(mu);
      todo.swap(commands);
    }
    for (auto& fn : todo) fn();
  }

  void read_clients() {
    for (int n = 0; n < 256; ++n) {
      auto frames = zmqu::recv(*router, true);
      if (!frames.ok() || frames->empty()) return;
      auto env = zmqu::parse_router(std::move(*frames));
      if (!env.ok()) {
        bad_from_client->inc();
        TS_LOG(kWarn) << "client api: " << env.error().to_string();
        continue;  // no usable envelope to answer to
      }
      on_client(std::move(*env));
    }
  }

  void read_scheduler(size_t i) {
    Scheduler& s = schedulers[i];
    for (int n = 0; n < 1024; ++n) {
      auto frames = zmqu::recv(*s.socket, true);
      if (!frames.ok() || frames->empty()) return;
      s.last_seen = Clock::now();
      if (!s.alive) {
        s.alive = true;
        TS_LOG(kInfo) << "scheduler=" << s.endpoint << " | alive";
      }
      auto msg = protocol::decode(frames->back());
      if (!msg.ok()) {
        bad_from_scheduler->inc();
        TS_LOG(kWarn) << "scheduler=" << s.endpoint << " | undecodable message: " << msg.error().to_string();
        continue;
      }
      dispatch(i, std::move(*msg));
    }
    publish_status();
  }

  void dispatch(size_t i, Message msg) {
    if (auto* hb = std::get_if<protocol::Heartbeat>(&msg)) {
      Scheduler& s = schedulers[i];
      if (hb->instance != 0 && s.instance != 0 && hb->instance != s.instance) {
        TS_LOG(kWarn) << "scheduler=" << s.endpoint << " | restarted (instance " << s.instance << " -> " << hb->instance
                      << "): failing its in-flight requests";
        fail_scheduler(i, "scheduler " + s.endpoint + " restarted; the request was lost");
      }
      if (hb->instance != 0) s.instance = hb->instance;
      schedulers[i].last = *hb;
      publish_worker_gauges(schedulers[i]);
      return;
    }
    const bool terminal = std::holds_alternative<protocol::FinalEvent>(msg) || std::holds_alternative<protocol::ErrorEvent>(msg);
    if (!terminal && !std::holds_alternative<protocol::TokenEvent>(msg)) {
      TS_LOG(kWarn) << "scheduler=" << schedulers[i].endpoint << " | ignoring '" << protocol::message_type(msg) << "'";
      return;
    }
    uint64_t id = protocol::message_id(msg);
    auto it = inflight.find(id);
    if (it == inflight.end()) return;  // abandoned or unknown
    std::shared_ptr<RequestSink> sink = it->second.sink;
    if (terminal) inflight.erase(it);
    sink->on_message(std::move(msg));
  }

  // The scheduler's per-worker figures as gauges (docs/protocol.md, "Heartbeats and failure").
  void publish_worker_gauges(Scheduler& s) {
    for (auto& [name, g] : s.worker_gauges)
      for (metrics::Gauge* x : {g.free, g.held, g.cached, g.running, g.waiting}) x->set(0);
    for (const auto& w : s.last.workers) {
      auto it = s.worker_gauges.find(w.name);
      if (it == s.worker_gauges.end()) {
        auto page = [&](const char* state) {
          return &registry->gauge("tessera_frontend_scheduler_pages",
                                  "K/V pages of each scheduler's workers by state, from its heartbeats (free + held + cached = total)",
                                  {{"scheduler", s.endpoint}, {"worker", w.name}, {"state", state}});
        };
        auto reqs = [&](const char* state) {
          return &registry->gauge("tessera_frontend_scheduler_requests",
                                  "requests of each scheduler's workers, running (holding pages) or waiting, from its heartbeats",
                                  {{"scheduler", s.endpoint}, {"worker", w.name}, {"state", state}});
        };
        it = s.worker_gauges.emplace(w.name, Scheduler::WorkerGauges{page("free"), page("held"), page("cached"),
                                                                      reqs("running"), reqs("waiting")}).first;
      }
      it->second.free->set(w.free_pages);
      it->second.held->set(w.held_pages);
      it->second.cached->set(w.cached_pages);
      it->second.running->set(w.running);
      it->second.waiting->set(w.waiting);
    }
  }

  void heartbeat(uint64_t seq) {
    const auto now = Clock::now();
    for (size_t i = 0; i < schedulers.size(); ++i) {
      Scheduler& s = schedulers[i];
      if (s.alive && now - s.last_seen > std::chrono::milliseconds(config.dead_after_ms)) {
        s.alive = false;
        s.last = {};
        publish_worker_gauges(s);
        TS_LOG(kWarn) << "scheduler=" << s.endpoint << " | no message for " << config.dead_after_ms << " ms: dead";
        fail_scheduler(i, "scheduler " + s.endpoint + " stopped answering");
      }
      protocol::Heartbeat hb{.id = seq, .role = "frontend", .name = config.name, .unix_ms = unix_ms()};
      (void)zmqu::send(*s.socket, {protocol::encode(hb)}, /*dontwait=*/true);
    }
    publish_status();
  }

  // Ends every in-flight request of scheduler i with kPeerDead.
  void fail_scheduler(size_t i, const std::string& why) {
    for (auto it = inflight.begin(); it != inflight.end();) {
      if (it->second.scheduler != i) {
        ++it;
        continue;
      }
      auto sink = it->second.sink;
      uint64_t id = it->first;
      it = inflight.erase(it);
      peer_dead_failures->inc();
      sink->on_message(protocol::ErrorEvent{.id = id, .code = ErrorCode::kPeerDead, .message = why});
    }
  }

  bool usable(const Scheduler& s) const { return s.alive && s.last.live_workers >= 1; }

  void publish_status() {
    bool ready = false;
    int32_t waiting = 0;
    std::vector<SchedulerStatus> st;
    for (auto& s : schedulers) {
      ready = ready || usable(s);
      if (s.alive) waiting += s.last.waiting;
      s.up->set(s.alive ? 1 : 0);
      st.push_back({s.endpoint, s.alive, s.last.live_workers, s.last.running, s.last.waiting});
    }
    update_ring();
    hub->ready_.store(ready);
    hub->waiting_.store(waiting);
    std::lock_guard<std::mutex> lock(status_mu);
    status = std::move(st);
  }

  // Keeps the ring equal to the set of usable schedulers.
  void update_ring() {
    for (const auto& sch : schedulers) {
      const bool in = ring.contains(sch.endpoint);
      if (usable(sch) && !in) (void)ring.add(sch.endpoint);
      if (!usable(sch) && in) (void)ring.remove(sch.endpoint);
    }
  }

  // Consistent hashing of the routing key over usable schedulers; -1 when none.
  int pick(const std::string& key) const {
    auto owner = ring.owner(mix64(fnv1a64(key)));
    if (!owner.ok()) return -1;
    return static_cast<int>(index_of.at(std::string(*owner)));
  }

  void submit(protocol::GenerateRequest req, std::shared_ptr<RequestSink> sink) {
    const uint64_t id = req.id;
    int i = pick(req.routing_key);
    if (i < 0) {
      sink->on_message(protocol::ErrorEvent{.id = id, .code = ErrorCode::kUnavailable,
                                            .message = "no scheduler with a live worker is available"});
      return;
    }
    Status sent = zmqu::send(*schedulers[i].socket, {protocol::encode(req)}, /*dontwait=*/true);
    if (!sent.ok()) {
      sink->on_message(protocol::ErrorEvent{.id = id, .code = ErrorCode::kUnavailable,
                                            .message = "cannot reach scheduler " + schedulers[i].endpoint + ": " + sent.error().message});
      return;
    }
    inflight[id] = InFlight{std::move(sink), static_cast<size_t>(i)};
  }

  void cancel(uint64_t id, bool forget) {
    auto it = inflight.find(id);
    if (it == inflight.end()) return;
    (void)zmqu::send(*schedulers[it->second.scheduler].socket, {protocol::encode(protocol::CancelRequest{.id = id})}, true);
    if (forget) inflight.erase(it);
  }
};

Hub::Hub(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Hub>> Hub::start(HubConfig config, metrics::Registry& metrics, ClientHandler on_client) {
  if (config.heartbeat_ms < 1 || config.dead_after_ms <= config.heartbeat_ms)
    return make_error(ErrorCode::kInvalidArgument, "need heartbeat_ms >= 1 and dead_after_ms > heartbeat_ms");
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->on_client = std::move(on_client);
  impl->registry = &metrics;
  impl->bad_from_scheduler = &metrics.counter("tessera_frontend_bad_messages_total",
                                              "messages that failed to decode, by source", {{"source", "scheduler"}});
  impl->bad_from_client = &metrics.counter("tessera_frontend_bad_messages_total",
                                           "messages that failed to decode, by source", {{"source", "zmq_client"}});
  impl->peer_dead_failures = &metrics.counter("tessera_frontend_peer_dead_requests_total",
                                              "requests failed because their scheduler stopped answering heartbeats or restarted");
  std::string endpoint;
  try {
    const std::string wake = "inproc://hub-wake";
    impl->wake_pull.bind(wake);
    impl->wake_push.connect(wake);
    if (!config.client_endpoint.empty()) {
      impl->router = std::make_unique<zmq::socket_t>(impl->ctx, zmq::socket_type::router);
      impl->router->set(zmq::sockopt::linger, 0);
      impl->router->set(zmq::sockopt::router_mandatory, 1);
      impl->router->bind(config.client_endpoint);
      endpoint = impl->router->get(zmq::sockopt::last_endpoint);
    }
    for (const auto& ep : config.scheduler_endpoints) {
      if (impl->index_of.count(ep)) return make_error(ErrorCode::kInvalidArgument, "scheduler endpoint " + ep + " is listed twice");
      Impl::Scheduler s;
      s.endpoint = ep;
      s.socket = std::make_unique<zmq::socket_t>(impl->ctx, zmq::socket_type::dealer);
      s.socket->set(zmq::sockopt::linger, 0);
      s.socket->set(zmq::sockopt::sndhwm, 100000);
      s.socket->set(zmq::sockopt::immediate, 1);  // queue only to a connected scheduler
      s.socket->connect(ep);
      s.up = &metrics.gauge("tessera_frontend_scheduler_up", "1 while the scheduler answers heartbeats", {{"endpoint", ep}});
      impl->index_of[ep] = impl->schedulers.size();
      impl->schedulers.push_back(std::move(s));
    }
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable, std::string("zmq setup failed: ") + e.what());
  }
  std::unique_ptr<Hub> hub(new Hub(std::move(impl)));
  hub->client_endpoint_ = endpoint;
  hub->impl_->hub = hub.get();
  hub->impl_->thread = std::thread([h = hub->impl_.get()] { h->run(); });
  return hub;
}

Hub::~Hub() { stop(); }

void Hub::stop() {
  impl_->stopping.store(true);
  impl_->post([] {});
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::vector<SchedulerStatus> Hub::schedulers() const {
  std::lock_guard<std::mutex> lock(impl_->status_mu);
  return impl_->status;
}

void Hub::submit(protocol::GenerateRequest request, std::shared_ptr<RequestSink> sink) {
  impl_->post([this, r = std::move(request), s = std::move(sink)]() mutable { impl_->submit(std::move(r), std::move(s)); });
}

size_t Hub::broadcast(std::string body) {
  impl_->post([this, b = std::move(body)] {
    for (auto& sched : impl_->schedulers) (void)zmqu::send(*sched.socket, {b}, /*dontwait=*/true);
  });
  return impl_->config.scheduler_endpoints.size();
}

void Hub::cancel(uint64_t id) {
  impl_->post([this, id] { impl_->cancel(id, false); });
}

void Hub::abandon(uint64_t id) {
  impl_->post([this, id] { impl_->cancel(id, true); });
}

bool Hub::send_to_client(const zmqu::Envelope& to, std::string body) {
  auto send = [this, frames = zmqu::router_reply(to, std::move(body))] {
    if (!impl_->router) return false;
    Status s = zmqu::send(*impl_->router, frames, true);
    if (!s.ok()) {
      TS_LOG(kDebug) << "client api reply dropped: " << s.error().message;
    }
    return s.ok();
  };
  if (std::this_thread::get_id() == impl_->thread.get_id()) return send();
  impl_->post([send = std::move(send)] { (void)send(); });
  return true;
}

}  // namespace tessera::frontend
