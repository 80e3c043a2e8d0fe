#include "tessera/frontend/scheduler_links.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <unordered_set>

#include "tessera/common/log.h"

namespace tessera::frontend {
namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

SchedulerLink::SchedulerLink(zmq::context_t& ctx, std::string endpoint, LivenessConfig liveness, metrics::Registry& registry,
                             const curve::ClientKeys& curve)
    : endpoint_(std::move(endpoint)),
      socket_(ctx, zmq::socket_type::dealer),
      liveness_(liveness),
      registry_(registry),
      up_(registry.gauge("tessera_frontend_scheduler_up", "1 while the scheduler answers heartbeats", {{"endpoint", endpoint_}})),
      routed_owner_(registry.counter("tessera_frontend_scheduler_routed_requests_total",
                                     "requests sent to each scheduler by the bounded-load ring: reason owner (the routing "
                                     "key's owner) or spill (the owner was at the load cap)",
                                     {{"scheduler", endpoint_}, {"reason", "owner"}})),
      routed_spill_(registry.counter("tessera_frontend_scheduler_routed_requests_total",
                                     "requests sent to each scheduler by the bounded-load ring: reason owner (the routing "
                                     "key's owner) or spill (the owner was at the load cap)",
                                     {{"scheduler", endpoint_}, {"reason", "spill"}})),
      inflight_(registry.gauge("tessera_frontend_scheduler_inflight",
                               "requests this frontend has in flight on each scheduler (the ring's load)",
                               {{"scheduler", endpoint_}})) {
  socket_.set(zmq::sockopt::linger, 0);
  zmqu::limit_message_size(socket_);
  curve::make_client(socket_, curve);
  socket_.set(zmq::sockopt::sndhwm, 100000);
  socket_.set(zmq::sockopt::immediate, 1);  // queue only to a connected scheduler
  socket_.set(zmq::sockopt::ipv6, 1);       // a dns: name may give IPv6 addresses
  // A number of its own per link: a link reopened for the same endpoint never meets the endpoint
  // of an earlier monitor.
  static std::atomic<uint64_t> links_made{0};
  const std::string monitor_endpoint = "inproc://tessera-scheduler-link-" + std::to_string(links_made.fetch_add(1));
  if (zmq_socket_monitor(socket_.handle(), monitor_endpoint.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) throw zmq::error_t();
  monitor_ = zmq::socket_t(ctx, zmq::socket_type::pair);
  monitor_.set(zmq::sockopt::linger, 0);
  monitor_.connect(monitor_endpoint);
  socket_.connect(endpoint_);
}

SchedulerLink::~SchedulerLink() {
  (void)zmq_socket_monitor(socket_.handle(), nullptr, 0);  // stop the monitor before its PAIR closes
  up_.set(0);
  inflight_.set(0);
  last_ = {};
  publish_worker_gauges();
}

bool SchedulerLink::check_disconnected() {
  bool dropped = false;
  for (;;) {
    zmq::message_t event, address;
    if (!monitor_.recv(event, zmq::recv_flags::dontwait)) break;
    if (event.more()) (void)monitor_.recv(address, zmq::recv_flags::dontwait);
    uint16_t id = 0;
    if (event.size() >= sizeof id) std::memcpy(&id, event.data(), sizeof id);
    if (id == ZMQ_EVENT_DISCONNECTED) dropped = true;
  }
  if (!dropped || !alive()) return false;
  mark_dead("connection lost");
  return true;
}

void SchedulerLink::heard(Clock::time_point now) {
  if (!alive()) {
    TS_LOG(kInfo) << "scheduler=" << endpoint_ << " | alive";
  }
  heard_ = true;
  liveness_.heard(now);
  up_.set(1);
}

bool SchedulerLink::on_heartbeat(const protocol::Heartbeat& hb) {
  const bool restarted = hb.instance != 0 && instance_ != 0 && hb.instance != instance_;
  if (restarted) {
    TS_LOG(kWarn) << "scheduler=" << endpoint_ << " | restarted (instance " << instance_ << " -> " << hb.instance
                  << "): failing its in-flight requests";
  }
  if (hb.instance != 0) instance_ = hb.instance;
  if (hb.draining && !last_.draining) {
    TS_LOG(kInfo) << "scheduler=" << endpoint_ << " | draining (shutting down): no new request goes to it";
  }
  last_ = hb;
  publish_worker_gauges();
  return restarted;
}

bool SchedulerLink::check_dead(Clock::time_point now) {
  if (!heard_ || !liveness_.check_dead(now)) return false;
  mark_dead("no message for " + std::to_string(liveness_.config().dead_after.count()) + " ms");
  return true;
}

void SchedulerLink::mark_dead(const std::string& why) {
  heard_ = false;  // not alive until it is heard from again
  last_ = {};
  publish_worker_gauges();
  up_.set(0);
  TS_LOG(kWarn) << "scheduler=" << endpoint_ << " | " << why << ": dead";
}

bool SchedulerLink::beat_if_due(Clock::time_point now, uint64_t seq, const std::string& name) {
  if (!liveness_.beat_due(now)) return false;
  protocol::Heartbeat hb{.id = seq, .role = "frontend", .name = name, .unix_ms = unix_ms()};
  (void)zmqu::send(socket_, {protocol::encode(hb)}, /*dontwait=*/true);
  liveness_.beat_sent(now);
  return true;
}

// The scheduler's per-worker figures as gauges (docs/protocol.md, "Heartbeats and failure").
void SchedulerLink::publish_worker_gauges() {
  for (auto& [name, g] : worker_gauges_)
    for (metrics::Gauge* x : {g.free, g.held, g.cached, g.running, g.waiting}) x->set(0);
  for (const auto& w : last_.workers) {
    auto it = worker_gauges_.find(w.name);
    if (it == worker_gauges_.end()) {
      auto page = [&](const char* state) {
        return &registry_.gauge("tessera_frontend_scheduler_pages",
                                "K/V pages of each scheduler's workers by state, from its heartbeats (free + held + cached = total)",
                                {{"scheduler", endpoint_}, {"worker", w.name}, {"state", state}});
      };
      auto reqs = [&](const char* state) {
        return &registry_.gauge("tessera_frontend_scheduler_requests",
                                "requests of each scheduler's workers, running (holding pages) or waiting, from its heartbeats",
                                {{"scheduler", endpoint_}, {"worker", w.name}, {"state", state}});
      };
      it = worker_gauges_.emplace(w.name, WorkerGauges{page("free"), page("held"), page("cached"), reqs("running"), reqs("waiting")})
               .first;
    }
    it->second.free->set(w.free_pages);
    it->second.held->set(w.held_pages);
    it->second.cached->set(w.cached_pages);
    it->second.running->set(w.running);
    it->second.waiting->set(w.waiting);
  }
}

Result<std::unique_ptr<SchedulerLinks>> SchedulerLinks::create(zmq::context_t& ctx, const std::vector<std::string>& endpoints,
                                                               LivenessConfig liveness, metrics::Registry& registry,
                                                               const curve::ClientKeys& curve) {
  TS_TRY(liveness.validate("--heartbeat-ms/--scheduler-dead-ms"));
  std::unordered_set<std::string> seen;
  for (const auto& ep : endpoints)
    if (!seen.insert(ep).second) return make_error(ErrorCode::kInvalidArgument, "scheduler endpoint " + ep + " is listed twice");
  std::unique_ptr<SchedulerLinks> links(new SchedulerLinks(ctx, liveness, registry, curve));
  (void)links->set_listed(endpoints);
  links->publish();
  return links;
}

SchedulerLinks::Change SchedulerLinks::set_listed(const std::vector<std::string>& endpoints) {
  Change change;
  const std::unordered_set<std::string> wanted(endpoints.begin(), endpoints.end());
  for (size_t i = 0; i < links_.size(); ++i) {
    if (links_[i] && links_[i]->listed() && !wanted.count(slot_endpoints_[i])) {
      links_[i]->set_listed(false);
      change.left.push_back(i);
      TS_LOG(kInfo) << "scheduler=" << slot_endpoints_[i] << " | no longer listed: no new requests; closed once idle";
    }
  }
  for (const auto& ep : endpoints) {
    auto it = std::find(slot_endpoints_.begin(), slot_endpoints_.end(), ep);
    size_t i = static_cast<size_t>(it - slot_endpoints_.begin());
    if (it == slot_endpoints_.end()) {
      slot_endpoints_.push_back(ep);
      links_.emplace_back();
    }
    if (links_[i] && links_[i]->listed()) continue;
    if (!links_[i]) {
      try {
        links_[i] = std::make_unique<SchedulerLink>(ctx_, ep, liveness_, registry_, curve_);
      } catch (const zmq::error_t& e) {
        // One endpoint ZeroMQ refuses never holds back the others (tried again on the next change).
        TS_LOG(kWarn) << "scheduler=" << ep << " | cannot connect: " << e.what() << "; left out";
        continue;
      }
    }
    links_[i]->set_listed(true);
    change.joined.push_back(i);
  }
  size_t listed = 0;
  for (const auto& l : links_) listed += l && l->listed();
  listed_count_.store(listed);
  return change;
}

bool SchedulerLinks::close_if_idle(size_t i, int64_t inflight) {
  if (!links_[i] || links_[i]->listed() || inflight != 0) return false;
  TS_LOG(kInfo) << "scheduler=" << slot_endpoints_[i] << " | unlisted and idle: link closed";
  links_[i].reset();
  return true;
}

std::vector<std::string> SchedulerLinks::endpoints() const { return slot_endpoints_; }

void SchedulerLinks::publish() {
  bool ready = false;
  int32_t waiting = 0;
  std::vector<SchedulerStatus> st;
  for (const auto& l : links_) {
    if (!l) continue;
    ready = ready || l->usable();
    if (l->alive()) waiting += l->last().waiting;
    st.push_back({l->endpoint(), l->listed(), l->alive(), l->last().live_workers, l->last().running, l->last().waiting,
                  l->last().context_length, l->last().page_size, l->last().name, l->last().workers, l->last().totals});
  }
  ready_.store(ready);
  waiting_.store(waiting);
  std::lock_guard<std::mutex> lock(status_mu_);
  status_ = std::move(st);
}

std::vector<SchedulerStatus> SchedulerLinks::status() const {
  std::lock_guard<std::mutex> lock(status_mu_);
  return status_;
}

}  // namespace tessera::frontend
