#include "tessera/frontend/hub.h"

#include <chrono>
#include <deque>
#include <mutex>
#include <thread>

#include "tessera/common/config.h"
#include "tessera/common/discovery.h"
#include "tessera/common/log.h"
#include "tessera/common/log_limit.h"
#include "tessera/frontend/scheduler_ring.h"

namespace tessera::frontend {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::Message;

// The Hub whose thread is the current thread (nullptr elsewhere): lets send_to_client know,
// without reading any member another thread may be writing, whether it runs on the hub thread.
thread_local const void* tls_hub = nullptr;

}  // namespace

struct Hub::Impl {
  HubConfig config;
  metrics::Registry* registry = nullptr;
  zmq::context_t ctx{1};
  std::unique_ptr<curve::Authenticator> auth;  // client API ZAP handler (client_curve); before ctx dies
  zmq::socket_t wake_pull{ctx, zmq::socket_type::pull};
  std::unique_ptr<zmq::socket_t> router;  // client API; hub thread only
  std::unique_ptr<SchedulerLinks> links;  // hub thread only, except its snapshot
  std::unique_ptr<SchedulerRing> ring;    // hub thread only
  std::unique_ptr<discovery::EndpointWatcher> watcher;  // its own thread; read by the hub thread
  uint64_t membership_version = 0;        // hub thread only: the watcher's version applied
  InflightTable inflight;                 // hub thread only
  ClientHandler on_client;                // set before the thread starts
  std::thread thread;
  std::atomic<bool> stopping{false};

  std::mutex mu;  // guards commands and wake_push
  std::deque<std::function<void()>> commands;
  zmq::socket_t wake_push{ctx, zmq::socket_type::push};

  metrics::Counter* bad_from_scheduler = nullptr;
  metrics::Counter* bad_from_client = nullptr;
  metrics::Counter* peer_dead_failures = nullptr;
  metrics::Counter* joined = nullptr;
  metrics::Counter* left = nullptr;
  metrics::Gauge* listed_gauge = nullptr;
  metrics::Gauge* usable_gauge = nullptr;

  void post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu);
    commands.push_back(std::move(fn));
    (void)wake_push.send(zmq::const_buffer("", 0), zmq::send_flags::dontwait);
  }

  void run(const void* hub) {
    tls_hub = hub;
    uint64_t beat_seq = 0;
    std::vector<zmq::pollitem_t> items;
    std::vector<size_t> open;  // the open links' slots, in poll order
    while (!stopping.load()) {
      items.clear();
      open.clear();
      for (size_t i = 0; i < links->size(); ++i)
        if (links->open(i)) open.push_back(i);
      items.push_back({wake_pull.handle(), 0, ZMQ_POLLIN, 0});
      if (router) items.push_back({router->handle(), 0, ZMQ_POLLIN, 0});
      auto wait = std::chrono::milliseconds(config.heartbeat_ms);
      const auto now = Clock::now();
      for (size_t i : open) {
        items.push_back({(*links)[i].socket().handle(), 0, ZMQ_POLLIN, 0});
        wait = std::min(wait, (*links)[i].until_beat(now));
      }
      // Their socket monitors: a dropped connection wakes the loop at once (tick() reads them).
      for (size_t i : open) items.push_back({(*links)[i].monitor().handle(), 0, ZMQ_POLLIN, 0});
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
      for (size_t j = 0; j < open.size(); ++j)
        if (items[k + j].revents & ZMQ_POLLIN) read_scheduler(open[j]);
      tick(++beat_seq);
    }
    // Shutting down: nobody will answer the in-flight requests.
    inflight.fail_all(ErrorCode::kUnavailable, "frontend is shutting down");
    tls_hub = nullptr;
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
        {
          static log::RateLimit limit;  // a peer can send these at will
          TS_LOG_LIMITED(kWarn, limit) << "client api: " << env.error().to_string();
        }
        continue;  // no usable envelope to answer to
      }
      on_client(std::move(*env));
    }
  }

  void read_scheduler(size_t i) {
    SchedulerLink& link = (*links)[i];
    for (int n = 0; n < 1024; ++n) {
      auto frames = zmqu::recv(link.socket(), true);
      if (!frames.ok() || frames->empty()) break;
      link.heard(Clock::now());
      auto msg = protocol::decode(frames->back());
      if (!msg.ok()) {
        bad_from_scheduler->inc();
        {
          static log::RateLimit limit;  // a peer can send these at will
          TS_LOG_LIMITED(kWarn, limit) << "scheduler=" << link.endpoint() << " | undecodable message: " << msg.error().to_string();
        }
        continue;
      }
      dispatch(i, std::move(*msg));
    }
    publish();
  }

  void dispatch(size_t i, Message msg) {
    if (auto* hb = std::get_if<protocol::Heartbeat>(&msg)) {
      SchedulerLink& link = (*links)[i];
      const bool was_draining = link.draining();
      if (link.on_heartbeat(*hb)) fail_scheduler(i, "scheduler " + link.endpoint() + " restarted; the request was lost");
      // Out of the ring at once, before the next message of this scheduler is read: the
      // refusals and hand-backs that follow its `draining` heartbeat are submitted elsewhere.
      if (link.draining() != was_draining) publish();
      return;
    }
    const bool event = std::holds_alternative<protocol::TokenEvent>(msg) || std::holds_alternative<protocol::FinalEvent>(msg) ||
                       std::holds_alternative<protocol::ErrorEvent>(msg) || std::holds_alternative<protocol::PrefixReport>(msg);
    if (!event) {
      {
        static log::RateLimit limit;  // a peer can send these at will
        TS_LOG_LIMITED(kWarn, limit) << "scheduler=" << (*links)[i].endpoint() << " | ignoring '" << protocol::message_type(msg) << "'";
      }
      return;
    }
    (void)inflight.deliver(std::move(msg));
  }

  // Liveness and heartbeats of every link; a fresh snapshot when a link died or beat.
  void tick(uint64_t seq) {
    const auto now = Clock::now();
    bool changed = false;
    std::vector<std::pair<size_t, std::string>> dead;
    changed = apply_membership() || changed;
    for (size_t i = 0; i < links->size(); ++i) {
      if (!links->open(i)) continue;
      if (links->close_if_idle(i, inflight.count(i))) {
        changed = true;
        continue;
      }
      SchedulerLink& link = (*links)[i];
      link.set_inflight(inflight.count(i));
      if (link.check_dead(now)) dead.emplace_back(i, "scheduler " + link.endpoint() + " stopped answering");
      if (link.check_disconnected()) dead.emplace_back(i, "the connection to scheduler " + link.endpoint() + " was lost");
      changed = link.beat_if_due(now, seq, config.name) || changed;
    }
    // Publish first: a request failed below may be submitted again by its connection (docs/api.md),
    // which must already see the dead scheduler out of the ring and ready() false when none is left.
    if (changed || !dead.empty()) publish();
    for (const auto& [i, why] : dead) fail_scheduler(i, why);
  }

  void fail_scheduler(size_t i, const std::string& why) {
    peer_dead_failures->inc(static_cast<double>(inflight.fail_scheduler(i, ErrorCode::kPeerDead, why)));
  }

  // The snapshot for other threads, and the ring equal to the usable schedulers.
  void publish() {
    for (size_t i = 0; i < links->size(); ++i) ring->set_usable(i, links->open(i) && (*links)[i].usable());
    listed_gauge->set(static_cast<double>(links->listed_count()));
    usable_gauge->set(static_cast<double>(ring->usable_count()));
    links->publish();
  }

  // The watcher's newest membership, when it changed: links opened / unlisted (true if so).
  bool apply_membership() {
    const uint64_t v = watcher->version();
    if (v == membership_version) return false;
    membership_version = v;
    const SchedulerLinks::Change change = links->set_listed(watcher->endpoints());
    for (size_t i = 0; i < links->size(); ++i) TS_CHECK_EQ(ring->add(links->endpoints()[i]), i);
    joined->inc(static_cast<double>(change.joined.size()));
    left->inc(static_cast<double>(change.left.size()));
    return true;
  }

  // One message to scheduler i without blocking (a full or dropped connection refuses it); the
  // error names the scheduler: "cannot reach scheduler <endpoint>: <why>".
  Status send_to(size_t i, std::string wire) {
    SchedulerLink& link = (*links)[i];
    Status sent = zmqu::send(link.socket(), {std::move(wire)}, /*dontwait=*/true);
    if (sent.ok()) return sent;
    return Error{ErrorCode::kUnavailable, "cannot reach scheduler " + link.endpoint() + ": " + sent.error().message};
  }

  void submit(protocol::GenerateRequest req, std::shared_ptr<RequestSink> sink) {
    const uint64_t id = req.id;
    // A scheduler whose connection dropped a moment ago (tick() has not seen it yet) refuses the
    // send: it leaves the ring until the next publish() and the request, never delivered, goes to
    // the next scheduler of its key (found by the multi-host tests: a killed scheduler's
    // frontend answered 503 to requests that another scheduler could serve).
    // The ring's bounded-load choice (scheduler_ring.h): the key's owner unless it is at the cap.
    std::string refused;
    for (size_t tries = 0; tries < links->size(); ++tries) {
      auto choice = ring->pick_bounded(
          req.routing_key, [&](size_t s) { return inflight.count(s); }, config.load_epsilon);
      if (!choice) break;
      const size_t i = choice->scheduler;
      Status sent = send_to(i, protocol::encode(req));
      if (sent.ok()) {
        inflight.add(id, std::move(sink), i);
        (*links)[i].routed(choice->spilled);
        return;
      }
      refused += (refused.empty() ? "" : "; nor ") + sent.error().message;
      ring->set_usable(i, false);
    }
    sink->on_message(protocol::ErrorEvent{
        .id = id, .code = ErrorCode::kUnavailable,
        .message = refused.empty() ? "no scheduler with a live worker is available" : refused});
  }

  // hub.h gather(): one GatherSink per call, shared by the copies sent.
  struct GatherSink : RequestSink {
    size_t remaining = 0;
    std::vector<Message> answers;
    std::function<void(std::vector<Message>)> done;
    void on_message(Message m) override {
      answers.push_back(std::move(m));
      if (--remaining == 0) done(std::move(answers));
    }
  };

  void gather(protocol::PrefixAdmin msg, bool to_all, std::function<void(std::vector<Message>)> done, std::atomic<uint64_t>& ids) {
    std::vector<size_t> targets;
    if (to_all) {
      for (size_t i = 0; i < links->size(); ++i)
        if (links->open(i) && (*links)[i].usable()) targets.push_back(i);
    } else if (std::optional<size_t> i = ring->pick(msg.routing_key)) {
      targets.push_back(*i);
    }
    if (targets.empty()) {
      done({protocol::ErrorEvent{.id = msg.id, .code = ErrorCode::kUnavailable, .message = "no scheduler with a live worker is available"}});
      return;
    }
    auto sink = std::make_shared<GatherSink>();
    sink->remaining = targets.size();
    sink->done = std::move(done);
    for (size_t i : targets) {
      msg.id = ids.fetch_add(1);
      Status sent = send_to(i, protocol::encode(msg));
      if (!sent.ok()) {
        sink->on_message(protocol::ErrorEvent{.id = msg.id, .code = ErrorCode::kUnavailable, .message = sent.error().message});
        continue;
      }
      inflight.add(msg.id, sink, i);
    }
  }

  void cancel(uint64_t id, bool forget) {
    const int i = inflight.scheduler_of(id);
    if (i < 0) return;
    (void)zmqu::send((*links)[static_cast<size_t>(i)].socket(), {protocol::encode(protocol::CancelRequest{.id = id})}, true);
    if (forget) inflight.erase(id);
  }
};

Hub::Hub(std::unique_ptr<Impl> impl, std::string client_endpoint)
    : impl_(std::move(impl)), client_endpoint_(std::move(client_endpoint)) {}

Result<std::unique_ptr<Hub>> Hub::create(HubConfig config, metrics::Registry& metrics) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->registry = &metrics;
  impl->bad_from_scheduler = &metrics.counter("tessera_frontend_bad_messages_total",
                                              "messages that failed to decode, by source", {{"source", "scheduler"}});
  impl->bad_from_client = &metrics.counter("tessera_frontend_bad_messages_total",
                                           "messages that failed to decode, by source", {{"source", "zmq_client"}});
  impl->peer_dead_failures = &metrics.counter("tessera_frontend_peer_dead_requests_total",
                                              "requests failed because their scheduler stopped answering heartbeats or restarted");
  impl->joined = &metrics.counter("tessera_frontend_scheduler_membership_changes_total",
                                  "schedulers that joined (those found at start-up included) or left the listed membership (--schedulers dns:/file: re-read)",
                                  {{"change", "joined"}});
  impl->left = &metrics.counter("tessera_frontend_scheduler_membership_changes_total",
                                "schedulers that joined (those found at start-up included) or left the listed membership (--schedulers dns:/file: re-read)",
                                {{"change", "left"}});
  impl->listed_gauge = &metrics.gauge("tessera_frontend_schedulers", "schedulers by state: listed (discovered) or usable "
                                      "(in the ring: alive with a live worker)", {{"state", "listed"}});
  impl->usable_gauge = &metrics.gauge("tessera_frontend_schedulers", "schedulers by state: listed (discovered) or usable "
                                      "(in the ring: alive with a live worker)", {{"state", "usable"}});
  TS_ASSIGN_OR_RETURN(std::vector<discovery::Source> sources,
                      discovery::parse_sources(config.scheduler_endpoints, "--schedulers"));
  if (config.scheduler_refresh_ms < 1) return make_error(ErrorCode::kInvalidArgument, "--scheduler-refresh-ms must be >= 1");
  impl->watcher = std::make_unique<discovery::EndpointWatcher>(
      std::move(sources), std::chrono::milliseconds(config.scheduler_refresh_ms), "schedulers");
  TS_ASSIGN_OR_RETURN(impl->links,
                      SchedulerLinks::create(impl->ctx, {},
                                             LivenessConfig{.interval = std::chrono::milliseconds(config.heartbeat_ms),
                                                            .dead_after = std::chrono::milliseconds(config.dead_after_ms)},
                                             metrics, config.to_schedulers));
  impl->ring = std::make_unique<SchedulerRing>();
  (void)impl->apply_membership();
  if (impl->links->size() == 0) {
    TS_LOG(kWarn) << "schedulers | none found yet in --schedulers (" << config::detail::join_list(config.scheduler_endpoints)
                  << "); looking again every " << config.scheduler_refresh_ms << " ms";
  }
  impl->publish();
  std::string endpoint;
  try {
    const std::string wake = "inproc://hub-wake";
    impl->wake_pull.bind(wake);
    impl->wake_push.connect(wake);
    if (!config.client_endpoint.empty()) {
      impl->router = std::make_unique<zmq::socket_t>(impl->ctx, zmq::socket_type::router);
      impl->router->set(zmq::sockopt::linger, 0);
      zmqu::limit_message_size(*impl->router);
      if (config.client_curve) {
        TS_ASSIGN_OR_RETURN(impl->auth, curve::Authenticator::start(impl->ctx));
        TS_TRY(curve::serve(*impl->router, impl->auth.get(), config.keys,
                            {.domain = "clients", .admit = {curve::Role::kClient},
                             .refused = &metrics.counter("tessera_frontend_refused_peers_total",
                                                         "client-API connections refused at the CURVE handshake "
                                                         "(public key not in client.key / client.d/)")}));
      }
      impl->router->set(zmq::sockopt::router_mandatory, 1);
      // A reply that would block is taken as a client gone (its request is abandoned without an
      // answer), so the queue to one client must hold a burst of many streams' token events
      // while this process's ZeroMQ I/O thread is behind (a loaded machine): 32 streams were
      // dropped at ~1000 queued events with the default HWM (found by the C++ client bench).
      impl->router->set(zmq::sockopt::sndhwm, 100000);
      impl->router->bind(config.client_endpoint);
      endpoint = impl->router->get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable, std::string("zmq setup failed: ") + e.what());
  }
  return std::unique_ptr<Hub>(new Hub(std::move(impl), std::move(endpoint)));
}

void Hub::start(ClientHandler on_client) {
  TS_CHECK(!impl_->thread.joinable());
  impl_->on_client = std::move(on_client);
  impl_->thread = std::thread([impl = impl_.get(), self = static_cast<const void*>(this)] { impl->run(self); });
}

Hub::~Hub() { stop(); }

void Hub::stop() {
  impl_->stopping.store(true);
  impl_->post([] {});
  if (impl_->thread.joinable()) impl_->thread.join();
}

bool Hub::ready() const { return impl_->links->ready(); }
int32_t Hub::waiting() const { return impl_->links->waiting(); }
std::vector<SchedulerStatus> Hub::schedulers() const { return impl_->links->status(); }

void Hub::submit(protocol::GenerateRequest request, std::shared_ptr<RequestSink> sink) {
  impl_->post([impl = impl_.get(), r = std::move(request), s = std::move(sink)]() mutable { impl->submit(std::move(r), std::move(s)); });
}

void Hub::gather(protocol::PrefixAdmin message, bool to_all, std::function<void(std::vector<protocol::Message>)> done) {
  impl_->post([impl = impl_.get(), m = std::move(message), to_all, d = std::move(done), ids = &next_id_]() mutable {
    impl->gather(std::move(m), to_all, std::move(d), *ids);
  });
}

size_t Hub::broadcast(std::string body) {
  impl_->post([impl = impl_.get(), b = std::move(body)] {
    for (size_t i = 0; i < impl->links->size(); ++i)
      if (impl->links->open(i) && (*impl->links)[i].listed()) (void)zmqu::send((*impl->links)[i].socket(), {b}, /*dontwait=*/true);
  });
  return impl_->links->listed_count();
}

void Hub::cancel(uint64_t id) {
  impl_->post([impl = impl_.get(), id] { impl->cancel(id, false); });
}

void Hub::abandon(uint64_t id) {
  impl_->post([impl = impl_.get(), id] { impl->cancel(id, true); });
}

bool Hub::send_to_client(const zmqu::Envelope& to, std::string body) {
  auto send = [impl = impl_.get(), frames = zmqu::router_reply(to, std::move(body))] {
    if (!impl->router) return false;
    Status s = zmqu::send(*impl->router, frames, true);
    if (!s.ok()) {
      TS_LOG(kDebug) << "client api reply dropped: " << s.error().message;
    }
    return s.ok();
  };
  if (tls_hub == this) return send();
  impl_->post([send = std::move(send)] { (void)send(); });
  return true;
}

}  // namespace tessera::frontend
