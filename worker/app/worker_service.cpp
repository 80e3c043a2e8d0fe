#include "worker_service.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "tessera/common/discovery.h"
#include "tessera/common/log.h"
#include "tessera/common/log_limit.h"
#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "worker_metrics.h"

namespace tessera::worker_app {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int64_t unix_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The compute thread: takes one plan at a time, runs StepExecutor::execute, sends the encoded
// step_result over its end of the inproc PAIR.
class Compute {
 public:
  Compute(zmq::context_t& ctx, worker::StepExecutor& executor, WorkerMetrics* metrics, int min_step_ms)
      : executor_(executor), metrics_(metrics), min_step_(min_step_ms), out_(ctx, zmq::socket_type::pair) {
    out_.connect("inproc://worker-results");
    thread_ = std::thread([this] { loop(); });
  }
  ~Compute() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // False when a plan is already in flight (the scheduler broke the one-plan rule).
  bool submit(StepPlan plan) {
    std::lock_guard<std::mutex> lock(mu_);
    if (busy_) return false;
    busy_ = true;
    plan_ = std::move(plan);
    cv_.notify_all();
    return true;
  }
  bool busy() const {
    std::lock_guard<std::mutex> lock(mu_);
    return busy_;
  }
  void done() {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }
  // StepExecutor::reset_requests() before the next plan (after the one executing now, if any),
  // on the compute thread: the executor is not thread-safe.
  void reset_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    reset_pending_ = true;
  }

 private:
  void loop() {
    for (;;) {
      StepPlan plan;
      bool reset = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || plan_.has_value(); });
        if (stop_) return;
        plan = std::move(*plan_);
        plan_.reset();
        reset = std::exchange(reset_pending_, false);
      }
      if (reset) {
        TS_LOG(kInfo) << "registered again: dropping the state of " << executor_.num_request_states() << " requests";
        executor_.reset_requests();
        if (metrics_ != nullptr) metrics_->reset_requests();
      }
      const auto t0 = Clock::now();
      auto r = executor_.execute(plan);
      StepResult result;
      if (r.ok()) {
        result = std::move(*r);
      } else {
        result.step_id = plan.step_id;
        result.error_code = r.error().code;
        result.error_message = r.error().message;
        TS_LOG(kWarn) << "step=" << plan.step_id << " | plan rejected: " << r.error().to_string();
      }
      result.compute_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (metrics_ != nullptr) {
        metrics_->on_step(plan, result.compute_ms / 1000.0, r.ok());
        metrics_->on_blend(executor_.blend_stats());
      }
      // Pacing (ServiceConfig::min_step_ms): the result leaves no earlier than min_step after the
      // step began; compute_ms stays the engine's own time. A stop ends the wait.
      if (min_step_.count() > 0) {
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_until(lock, t0 + min_step_, [&] { return stop_; })) return;
      }
      std::string body = protocol::encode(protocol::StepResultMsg{.id = plan.step_id, .result = std::move(result)});
      (void)zmqu::send(out_, {std::move(body)});
    }
  }

  worker::StepExecutor& executor_;
  WorkerMetrics* metrics_;  // may be null
  const milliseconds min_step_;  // 0 = no pacing
  zmq::socket_t out_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<StepPlan> plan_;  // GUARDED_BY(mu_)
  bool busy_ = false;             // GUARDED_BY(mu_): a plan is queued or executing
  bool stop_ = false;             // GUARDED_BY(mu_)
  bool reset_pending_ = false;    // GUARDED_BY(mu_): reset_requests() before the next plan
  std::thread thread_;
};

StepResult error_result(uint64_t step_id, const Error& e) {
  StepResult r;
  r.step_id = step_id;
  r.error_code = e.code;
  r.error_message = e.message;
  return r;
}

// The DEALER to the current scheduler and the PAIR reading its socket monitor. A new one per
// scheduler the worker moves to, so monitor events always concern the current connection.
struct SchedulerSocket {
  zmq::socket_t sched;
  zmq::socket_t monitor;
  std::string endpoint;

  SchedulerSocket(zmq::context_t& ctx, const ServiceConfig& config, const std::string& ep, uint64_t generation)
      : sched(ctx, zmq::socket_type::dealer), monitor(ctx, zmq::socket_type::pair), endpoint(ep) {
    sched.set(zmq::sockopt::linger, 0);
    zmqu::limit_message_size(sched);
    curve::make_client(sched, config.curve);
    sched.set(zmq::sockopt::routing_id, config.name);
    sched.set(zmq::sockopt::ipv6, 1);  // a dns: name may give IPv6 addresses
    const std::string mon = "inproc://worker-monitor-" + std::to_string(generation);
    if (zmq_socket_monitor(sched.handle(), mon.c_str(), ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0)
      throw zmq::error_t();
    monitor.connect(mon);
    sched.connect(endpoint);
  }
  ~SchedulerSocket() { (void)zmq_socket_monitor(sched.handle(), nullptr, 0); }
  SchedulerSocket(const SchedulerSocket&) = delete;
  SchedulerSocket& operator=(const SchedulerSocket&) = delete;
};

}  // namespace

Status run_service(const ServiceConfig& config, const Model& model, worker::StepExecutor& executor,
                   const std::atomic<bool>& stop_requested, WorkerMetrics* metrics) {
  TS_ASSIGN_OR_RETURN(std::vector<discovery::Source> sources,
                      discovery::parse_source_list(config.scheduler_endpoint, "--scheduler"));
  discovery::EndpointWatcher watcher(std::move(sources), milliseconds(std::max(100, config.refresh_ms)), "schedulers");
  // A scheduler that failed is passed over for a while (its workers spread over the others).
  discovery::FailoverOrder order(config.name, milliseconds(3 * config.dead_after_ms), config.listed_order);
  order.set_endpoints(watcher.endpoints_in_order());
  uint64_t membership = watcher.version();

  zmq::context_t ctx(1);
  zmq::socket_t results(ctx, zmq::socket_type::pair);
  std::unique_ptr<SchedulerSocket> link;
  uint64_t link_generation = 0;  // +1 per SchedulerSocket
  auto open_link = [&](const std::string& ep) -> Status {
    try {
      link.reset();
      link = std::make_unique<SchedulerSocket>(ctx, config, ep, ++link_generation);
    } catch (const zmq::error_t& e) {
      return make_error(ErrorCode::kInvalidArgument, "cannot connect to scheduler '" + ep + "': " + e.what());
    }
    return ok_status();
  };
  try {
    results.bind("inproc://worker-results");
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kInternal, std::string("inproc results socket: ") + e.what());
  }
  {
    const std::string first = order.choose(Clock::now());
    if (first.empty()) {
      TS_LOG(kWarn) << "no scheduler found yet in --scheduler " << config.scheduler_endpoint << "; looking again every "
                    << config.refresh_ms << " ms";
    } else {
      TS_TRY(open_link(first));
    }
  }
  Compute compute(ctx, executor, metrics, config.min_step_ms);

  const auto& mc = model.config();
  const worker::PoolGeometry pool = executor.backend().geometry();
  protocol::RegisterWorker reg{.id = 1,
                               .worker_name = config.name,
                               .capabilities = executor.capabilities(),
                               .model_fingerprint = model.fingerprint,
                               .num_pages = pool.num_pages,
                               .page_size = pool.page_size,
                               .max_batch_tokens = config.max_batch_tokens,
                               .max_seq_len = mc.max_seq_len,
                               .vocab_size = mc.vocab_size,
                               .eos_id = config.eos_id};
  auto send = [&](const protocol::Message& m) {
    if (link) (void)zmqu::send(link->sched, {protocol::encode(m)}, /*dontwait=*/true);
  };
  auto current = [&]() -> std::string { return link ? link->endpoint : std::string("(none)"); };

  bool registered = false;
  int unanswered_registers = 0;  // since the last register_ack
  int registrations = 0;  // accepted register_acks
  bool exiting = false;  // leave once no plan is in flight
  bool draining = false;  // told the scheduler; waiting for its `shutdown`
  bool stop_seen = false;
  bool connected = false;   // the monitor's last word: the TCP connection is up
  bool reached = false;     // it came up at least once since the worker last lost its registration
  int heartbeat_ms = config.heartbeat_ms;
  uint64_t beat_seq = 0;
  auto last_heard = Clock::now();
  auto next_register = Clock::now();
  auto next_beat = Clock::now();
  auto unregistered_since = Clock::now();
  auto next_register_warning = Clock::now() + milliseconds(config.dead_after_ms);
  Clock::time_point drain_deadline{};
  auto attempt_since = Clock::now();  // when the worker began to register with the current scheduler
  uint64_t plan_generation = 0;       // link_generation of the plan in flight (its result goes there only)
  auto set_registered = [&](bool r) {
    registered = r;
    if (!r) {
      unregistered_since = Clock::now();
      reached = connected;
    }
    if (metrics != nullptr) metrics->set_registered(r);
  };
  // Drain: tell the scheduler (it stops routing to us and answers `shutdown` once our requests
  // are done); not registered, there is nothing to drain.
  auto begin_drain = [&](const char* why) {
    if (draining || exiting) return;
    if (!registered) {
      TS_LOG(kInfo) << why << ": not registered, exiting";
      exiting = true;
      return;
    }
    TS_LOG(kInfo) << why << ": draining (no new requests; the running ones finish, up to " << config.drain_timeout_s
                  << " s)";
    draining = true;
    drain_deadline = Clock::now() + std::chrono::seconds(config.drain_timeout_s);
    if (metrics != nullptr) metrics->set_draining(true);
    send(protocol::Drain{.id = ++beat_seq});
  };
  // The current scheduler is gone (dead, unreachable, or never answered): register with the next
  // one of the list (docs/architecture.md "Several schedulers"), or again with the same one when it
  // is the only choice. The old scheduler's requests end with it.
  auto move_on = [&](const std::string& why) -> Status {
    const auto now = Clock::now();
    if (link) order.failed(link->endpoint, now);
    const std::string next = order.choose(now);
    if (!next.empty() && (!link || next != link->endpoint)) {
      TS_LOG(kWarn) << "scheduler " << current() << ": " << why << "; registering with " << next;
      TS_TRY(open_link(next));
      if (metrics != nullptr) metrics->scheduler_switched();
      connected = reached = false;
    } else {
      TS_LOG(kWarn) << "scheduler " << current() << ": " << why << "; registering again";
    }
    if (registered) set_registered(false);
    unanswered_registers = 0;
    next_register = now;
    next_register_warning = now + milliseconds(config.dead_after_ms);
    attempt_since = now;
    last_heard = now;
    return ok_status();
  };

  while (true) {
    if (stop_requested.load() && !stop_seen) {
      stop_seen = true;
      begin_drain("signal");
    }
    if (exiting && !compute.busy()) break;
    if (watcher.version() != membership) {
      membership = watcher.version();
      order.set_endpoints(watcher.endpoints_in_order());
      const auto& eps = order.endpoints();
      // Registered, the worker stays where it is; otherwise it follows the new list.
      if (!registered && !draining && (!link || std::find(eps.begin(), eps.end(), link->endpoint) == eps.end())) {
        const std::string next = order.choose(Clock::now());
        if (!next.empty()) {
          TS_LOG(kInfo) << "schedulers changed: registering with " << next;
          TS_TRY(open_link(next));
          connected = reached = false;
          attempt_since = next_register = Clock::now();
        }
      }
    }
    const auto now = Clock::now();
    if (draining && !exiting && now >= drain_deadline) {
      TS_LOG(kWarn) << "drain timeout (" << config.drain_timeout_s
                    << " s): exiting; the scheduler re-queues or fails the requests still here";
      exiting = true;
    }
    // While draining, a scheduler that stops answering heartbeats is gone: nothing left to finish.
    const int silent_ms = draining ? std::min(config.dead_after_ms, std::max(500, 4 * heartbeat_ms)) : config.dead_after_ms;
    if (draining && !exiting && now - last_heard > milliseconds(silent_ms)) {
      TS_LOG(kInfo) << "drain: the scheduler is silent; exiting";
      exiting = true;
    }
    if (!registered && now >= next_register_warning) {
      const long waited = static_cast<long>(std::chrono::duration_cast<milliseconds>(now - unregistered_since).count());
      if (connected || reached) {
        TS_LOG(kWarn) << "not registered after " << waited << " ms: connected to " << current()
                      << " but no register_ack; another worker may already use the name '" << config.name
                      << "' (the scheduler ignores a second peer with the same name: give each worker its own --name), "
                         "or the peer is not a tessera-scheduler's worker endpoint";
      } else {
        TS_LOG(kWarn) << "not registered after " << waited << " ms: no connection to " << current()
                      << " (is tessera-scheduler running with that --worker-endpoint?)";
      }
      next_register_warning = now + std::chrono::seconds(30);
    }
    // Not while a plan of the scheduler it left is still executing: the new scheduler's first
    // plan would find the compute thread busy and fail its requests (found by the multi-scheduler
    // test: a scheduler killed mid-step). The plan ends within a step; its result is dropped.
    if (!registered && now >= next_register && !compute.busy()) {
      // Each attempt has its own id, and only the ack of the latest one counts: an ack of an older
      // attempt (delayed by a link outage) is followed by plans of a Batcher that the scheduler
      // replaced when the next attempt reached it — taking it would start one of those plans and
      // then refuse the new Batcher's first plan as "already executing".
      ++reg.id;
      send(reg);
      next_register = now + milliseconds(1000);
      if (++unanswered_registers == 10) {
        TS_LOG(kWarn) << "no register_ack from " << current() << " after 10 attempts: is the scheduler "
                      << "up, and does it admit this worker's CURVE key (worker.key / worker.d/ in its --curve-dir)? "
                      << "A refused handshake is not retried: restart the worker once its key is admitted";
      }
    }
    if (registered && now >= next_beat) {
      send(protocol::Heartbeat{.id = ++beat_seq, .role = "worker", .name = config.name, .unix_ms = unix_ms()});
      next_beat = now + milliseconds(heartbeat_ms);
    }
    if (registered && !draining && now - last_heard > milliseconds(config.dead_after_ms)) {
      TS_TRY(move_on("silent for " + std::to_string(config.dead_after_ms) + " ms"));
      continue;
    }
    // Another scheduler of the list gets its turn when this one does not answer `register`.
    if (!registered && !draining && link && order.endpoints().size() > 1 &&
        now - attempt_since > milliseconds(config.dead_after_ms)) {
      TS_TRY(move_on("no register_ack for " + std::to_string(config.dead_after_ms) + " ms"));
      continue;
    }

    zmq::pollitem_t items[] = {{results.handle(), 0, ZMQ_POLLIN, 0},
                               {link ? link->sched.handle() : nullptr, 0, ZMQ_POLLIN, 0},
                               {link ? link->monitor.handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, link ? 3 : 1, milliseconds(std::min(heartbeat_ms, 100)));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      return make_error(ErrorCode::kInternal, std::string("zmq poll: ") + e.what());
    }
    if (items[0].revents & ZMQ_POLLIN) {
      auto frames = zmqu::recv(results, true);
      compute.done();
      // A result of a plan from a scheduler the worker has left goes nowhere.
      if (link && plan_generation == link_generation && frames.ok() && !frames->empty())
        (void)zmqu::send(link->sched, {frames->back()}, true);
    }
    if (!link) continue;
    bool dropped = false;
    if (items[2].revents & ZMQ_POLLIN) {
      // A monitor event: frame 1 = uint16 event id + uint32 value, frame 2 = the address.
      for (;;) {
        auto ev = zmqu::recv(link->monitor, true);
        if (!ev.ok() || ev->empty()) break;
        uint16_t id = 0;
        if ((*ev)[0].size() >= sizeof id) std::memcpy(&id, (*ev)[0].data(), sizeof id);
        if (id == ZMQ_EVENT_CONNECTED) connected = reached = true;
        if (id == ZMQ_EVENT_DISCONNECTED) {
          connected = false;
          dropped = true;
        }
      }
    }
    // A dropped connection means the scheduler process is gone (its kernel closed the socket):
    // move on at once instead of waiting for the silence.
    if (dropped && registered && !draining) {
      TS_TRY(move_on("connection lost"));
      continue;
    }
    if (dropped && draining && !exiting) {
      TS_LOG(kInfo) << "drain: the connection to the scheduler was lost; exiting";
      exiting = true;
    }
    if (!(items[1].revents & ZMQ_POLLIN)) continue;
    for (int n = 0; n < 64; ++n) {
      auto frames = zmqu::recv(link->sched, true);
      if (!frames.ok() || frames->empty()) break;
      last_heard = Clock::now();
      const std::string& body = frames->back();
      auto msg = protocol::decode(body);
      if (!msg.ok()) {
        // A plan that fails validation still needs an answer, or the scheduler's batcher waits.
        const uint64_t id = protocol::peek_id(body);
        {
          static log::RateLimit limit;  // a peer can send these at will
          TS_LOG_LIMITED(kWarn, limit) << "undecodable message from scheduler (id " << id << "): " << msg.error().to_string();
        }
        if (registered && id != 0 && !compute.busy())
          send(protocol::StepResultMsg{.id = id, .result = error_result(id, msg.error())});
        continue;
      }
      if (auto* ack = std::get_if<protocol::RegisterAck>(&*msg)) {
        if (!registered && ack->id != reg.id) {
          TS_LOG(kDebug) << "ignoring the ack of an older register attempt (" << ack->id << ", latest " << reg.id << ")";
          continue;
        }
        if (!ack->accepted)
          return make_error(ErrorCode::kPermissionDenied, "scheduler rejected registration: " + ack->reason);
        if (!registered) {
          TS_LOG(kInfo) << "registered with " << current() << " as '" << config.name << "'";
          // The scheduler starts this worker afresh (a new Batcher; a restarted one reuses request
          // ids): nothing keyed by a request id may survive from before.
          if (registrations++ > 0) compute.reset_requests();
        }
        set_registered(true);
        unanswered_registers = 0;
        heartbeat_ms = std::max(1, ack->heartbeat_ms);
        next_beat = Clock::now();
      } else if (auto* plan = std::get_if<protocol::StepPlanMsg>(&*msg)) {
        if (!registered) continue;
        const uint64_t step = plan->plan.step_id;
        if (compute.submit(std::move(plan->plan))) {
          plan_generation = link_generation;
        } else {
          send(protocol::StepResultMsg{
              .id = step, .result = error_result(step, make_error(ErrorCode::kInvalidArgument,
                                                                  "a step plan is already executing on this worker"))});
        }
      } else if (std::holds_alternative<protocol::Heartbeat>(*msg)) {
        // liveness only (last_heard updated above)
      } else if (std::holds_alternative<protocol::Drain>(*msg)) {
        begin_drain("drain requested by the scheduler");
      } else if (std::holds_alternative<protocol::Shutdown>(*msg)) {
        TS_LOG(kInfo) << (draining ? "drained: the scheduler has no request left here; exiting"
                                   : "shutdown requested by the scheduler");
        exiting = true;
      } else {
        {
          static log::RateLimit limit;  // a peer can send these at will
          TS_LOG_LIMITED(kWarn, limit) << "ignoring '" << protocol::message_type(*msg) << "' from the scheduler";
        }
      }
    }
  }
  // Say goodbye so the scheduler fails our requests at once instead of waiting for the timeout.
  send(protocol::Shutdown{.id = beat_seq + 1});
  return ok_status();
}

}  // namespace tessera::worker_app
