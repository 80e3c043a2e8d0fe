#include "service.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "tessera/common/log.h"
#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/scheduler/batcher.h"
#include "tessera/common/dki.h"

namespace tessera::scheduler_app {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int64_t unix_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
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

struct Service::Impl {
  const uint64_t instance = new_instance_id();
  struct Worker {
    std::string name;  // == ZeroMQ routing id
    protocol::RegisterWorker info;
    std::unique_ptr<scheduler::Batcher> batcher;
    Clock::time_point last_seen{};
    bool in_flight = false;
    uint64_t step_id = 0;
    Clock::time_point sent_at{};
    metrics::Gauge* free_pages = nullptr;
    metrics::Gauge* held_pages = nullptr;
    metrics::Gauge* cached_pages = nullptr;
  };
  struct Req {
    std::string frontend;  // routing id of the frontend that sent it
    uint64_t client_id = 0;
    std::string worker;
    Clock::time_point arrival{};
    Clock::time_point scheduled{};   // first plan that carried it
    Clock::time_point first_token{};
    bool was_scheduled = false;
    bool got_token = false;
    bool has_preference = false;  // dki: no fill by the end means its pages were cached ("memory")
    std::optional<FillResult> fill;
    // The request as first submitted, kept until its first token: if its worker dies before
    // that, it is re-queued on another worker and nobody notices (requeue()). Cleared after the
    // first token (from then on a dead worker means a kPeerDead error).
    std::optional<scheduler::Request> original;
    int requeues = 0;
  };
  struct Metrics {
    metrics::Gauge* live_workers;
    metrics::Gauge* running;
    metrics::Gauge* waiting;
    metrics::Counter* prompt_tokens;
    metrics::Counter* cached_tokens;
    metrics::Gauge* hit_rate;
    metrics::Histogram* step_seconds;
    metrics::Histogram* compute_seconds;
    metrics::Histogram* ttft_seconds;
    metrics::Counter* bad_frontend;
    metrics::Counter* bad_worker;
    metrics::Counter* peer_dead;
    metrics::Counter* requeued;
    metrics::Counter* preemptions;
  };

  ServiceConfig config;
  metrics::Registry* registry = nullptr;
  Metrics m{};
  zmq::context_t ctx{1};
  zmq::socket_t frontends{ctx, zmq::socket_type::router};
  zmq::socket_t workers_sock{ctx, zmq::socket_type::router};
  std::string frontend_bound, worker_bound;
  scheduler::Router router = std::move(scheduler::Router::create({}).value());

  std::map<std::string, Worker> workers;                     // by name
  std::unordered_map<uint64_t, Req> requests;                // by internal id
  std::map<std::pair<std::string, uint64_t>, uint64_t> by_client;  // (frontend, client id) -> internal
  std::map<std::string, Clock::time_point> frontend_seen;    // by routing id
  uint64_t next_id = 1;
  uint64_t beat_seq = 0;
  std::string fingerprint;  // of the first registered worker; all must match
  uint64_t fingerprint64 = 0;  // the same, as a number (seed of preference content hashes)
  int64_t preemptions_seen = 0;
  std::unordered_map<std::string, uint64_t> preference_epoch;  // dki: user -> InvalidateUser count

  // ---- sending ----
  void to_frontend(const std::string& identity, const protocol::Message& msg) {
    (void)zmqu::send(frontends, {identity, protocol::encode(msg)}, /*dontwait=*/true);
  }
  void to_worker(const std::string& name, const protocol::Message& msg) {
    (void)zmqu::send(workers_sock, {name, protocol::encode(msg)}, /*dontwait=*/true);
  }
  void fail_client(const std::string& frontend, uint64_t client_id, ErrorCode code, std::string message) {
    to_frontend(frontend, protocol::ErrorEvent{.id = client_id, .code = code, .message = std::move(message)});
  }
  void forget(uint64_t id) {
    auto it = requests.find(id);
    if (it == requests.end()) return;
    by_client.erase({it->second.frontend, it->second.client_id});
    requests.erase(it);
  }

  // ---- frontends ----
  void read_frontends() {
    for (int n = 0; n < 1024; ++n) {
      auto frames = zmqu::recv(frontends, true);
      if (!frames.ok() || frames->empty()) return;
      auto env = zmqu::parse_router(std::move(*frames));
      if (!env.ok()) {
        m.bad_frontend->inc();
        TS_LOG(kWarn) << "frontend socket: " << env.error().to_string();
        continue;
      }
      frontend_seen[env->identity] = Clock::now();
      auto msg = protocol::decode(env->body);
      if (!msg.ok()) {
        m.bad_frontend->inc();
        TS_LOG(kWarn) << "frontend message: " << msg.error().to_string();
        (void)zmqu::send(frontends, zmqu::router_reply(*env, protocol::encode_error(protocol::peek_id(env->body),
                                                                                      msg.error().code, msg.error().message)),
                         true);
        continue;
      }
      on_frontend(*env, std::move(*msg));
    }
  }

  void on_frontend(const zmqu::Envelope& env, protocol::Message msg) {
    if (auto* hb = std::get_if<protocol::Heartbeat>(&msg)) {
      protocol::Heartbeat reply = stats_heartbeat(hb->id);
      (void)zmqu::send(frontends, zmqu::router_reply(env, protocol::encode(reply)), true);
    } else if (auto* req = std::get_if<protocol::GenerateRequest>(&msg)) {
      if (env.delimiter) {  // REQ-style peers cannot take a stream of replies; refuse clearly
        (void)zmqu::send(frontends, zmqu::router_reply(env, protocol::encode_error(req->id, ErrorCode::kUnsupported,
                                                                                     "use a DEALER socket: the scheduler streams several replies per request")),
                         true);
        return;
      }
      on_generate(env.identity, std::move(*req));
    } else if (auto* c = std::get_if<protocol::CancelRequest>(&msg)) {
      on_cancel(env.identity, c->id);
    } else if (auto* inv = std::get_if<protocol::InvalidateUser>(&msg)) {
      // dki: admin invalidate. The user's later requests get a new namespace epoch, so the
      // preference pages cached under the old one are never matched again (LRU evicts them).
      ++preference_epoch[inv->user];
      TS_LOG(kInfo) << "user=" << inv->user << " | preference K/V invalidated (epoch " << preference_epoch[inv->user] << ")";
    } else {
      fail_client(env.identity, protocol::message_id(msg), ErrorCode::kUnsupported,
                  "the scheduler's frontend socket does not take '" + std::string(protocol::message_type(msg)) + "'");
    }
  }

  protocol::Heartbeat stats_heartbeat(uint64_t id) const {
    protocol::Heartbeat hb{.id = id, .role = "scheduler", .name = config.name, .unix_ms = unix_ms(), .instance = instance};
    for (const auto& [name, w] : workers) {
      hb.live_workers += 1;
      hb.running += static_cast<int32_t>(w.batcher->num_running());
      hb.waiting += static_cast<int32_t>(w.batcher->num_waiting());
      hb.free_pages += w.batcher->pages().num_free() + w.batcher->pages().num_cached();
      const auto c = w.batcher->pages().counts();
      hb.workers.push_back({.name = name, .free_pages = static_cast<int32_t>(c.free),
                            .held_pages = static_cast<int32_t>(c.held), .cached_pages = static_cast<int32_t>(c.cached),
                            .running = static_cast<int32_t>(w.batcher->num_running()),
                            .waiting = static_cast<int32_t>(w.batcher->num_waiting())});
    }
    return hb;
  }

  Status check_request(const protocol::GenerateRequest& r) const {
    if (r.prompt_tokens.empty())
      return make_error(ErrorCode::kInvalidArgument, "prompt_tokens is empty (the frontend sends the tokenized prompt)");
    if (!r.preference.empty() && r.preference_tokens.empty())
      return make_error(ErrorCode::kInvalidArgument, "preference is set but preference_tokens is empty (the frontend tokenizes it)");
    const int32_t vocab = workers.empty() ? 0 : workers.begin()->second.info.vocab_size;
    for (size_t i = 0; i < r.preference_tokens.size(); ++i) {
      const int32_t t = r.preference_tokens[i];
      if (t < 0 || (vocab > 0 && t >= vocab))
        return make_error(ErrorCode::kInvalidArgument, "preference_tokens[" + std::to_string(i) + "] = " + std::to_string(t) +
                                                           " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    if (r.user.size() > dki::kMaxUserBytes)
      return make_error(ErrorCode::kInvalidArgument, "user has " + std::to_string(r.user.size()) + " bytes, at most " +
                                                         std::to_string(dki::kMaxUserBytes));
    for (size_t i = 0; i < r.prompt_tokens.size(); ++i) {
      const int32_t t = r.prompt_tokens[i];
      if (t < 0 || (vocab > 0 && t >= vocab))
        return make_error(ErrorCode::kInvalidArgument, "prompt_tokens[" + std::to_string(i) + "] = " + std::to_string(t) +
                                                           " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    return ok_status();
  }

  void on_generate(const std::string& frontend, protocol::GenerateRequest r) {
    if (by_client.count({frontend, r.id})) {
      fail_client(frontend, r.id, ErrorCode::kInvalidArgument, "request id " + std::to_string(r.id) + " is already running");
      return;
    }
    if (workers.empty()) {
      fail_client(frontend, r.id, ErrorCode::kUnavailable, "no worker is registered with scheduler '" + config.name + "'");
      return;
    }
    if (Status st = check_request(r); !st.ok()) {
      fail_client(frontend, r.id, st.error().code, st.error().message);
      return;
    }
    const uint64_t id = next_id++;
    bool has_preference = false;
    scheduler::Request req;
    req.id = id;
    req.prompt = std::move(r.prompt_tokens);
    req.ns.model_fingerprint = fingerprint;
    if (!config.prefix_cache) req.ns.tenant_salt = "no-prefix-cache:" + std::to_string(id);
    // dki: preference K/V injection (docs/preference.md). effective_alpha <= 0.1 means none at all.
    if (!r.preference_tokens.empty()) {
      if (const std::optional<float> alpha = dki::effective_alpha(r.preference_alpha)) {
        const uint64_t hash = dki::preference_hash(r.preference_tokens, fingerprint64);
        req.ns.user = r.user.empty() ? "\x01anonymous:" + std::to_string(id) : r.user;  // "" = never shared, never cached
        req.ns.preference_hash = hash == 0 ? 1 : hash;
        req.ns.alpha = *alpha;
        if (auto ep = preference_epoch.find(r.user); ep != preference_epoch.end())
          req.ns.tenant_salt += "|pref-epoch:" + std::to_string(ep->second);
        has_preference = true;
        req.preference = scheduler::Preference{.blob_key = dki::make_blob_key(r.user, hash),
                                               .num_tokens = static_cast<int32_t>(r.preference_tokens.size()),
                                               .alpha = *alpha, .tokens = std::move(r.preference_tokens)};
      }
    }
    req.sampling = r.sampling;
    req.max_tokens = r.max_tokens;
    req.stop_ids = std::move(r.stop_token_ids);
    req.ignore_eos = r.ignore_eos;
    req.priority = r.priority;

    std::optional<scheduler::Request> original = req;
    auto route = place(std::move(req));
    if (!route.ok()) {
      fail_client(frontend, r.id, route.error().code, route.error().message);
      return;
    }
    requests[id] = Req{.frontend = frontend, .client_id = r.id, .worker = route->worker, .arrival = Clock::now(),
                       .has_preference = has_preference, .original = std::move(original)};
    by_client[{frontend, r.id}] = id;
    TS_LOG(kDebug) << "req=" << id << " client=" << r.id << " worker=" << route->worker
                   << " | admitted to queue, cached prefix " << route->cached_tokens;
  }

  // Routes a request over the live workers (Router::route) and queues it on the chosen one.
  // On error nothing is kept anywhere.
  Result<scheduler::RouteDecision> place(scheduler::Request req) {
    std::vector<scheduler::WorkerSnapshot> snaps;
    snaps.reserve(workers.size());
    for (const auto& [name, w] : workers)
      snaps.push_back({.name = name, .load = w.batcher->load(), .cached_tokens = w.batcher->cached_prefix_tokens(req)});
    TS_ASSIGN_OR_RETURN(scheduler::RouteDecision route, router.route(router.routing_key(req), snaps));
    Worker& w = workers.at(route.worker);
    TS_TRY(w.batcher->submit(std::move(req)));
    registry->counter("tessera_scheduler_routed_requests_total", "requests routed, by worker and deciding reason",
                      {{"worker", w.name}, {"reason", route.reason == scheduler::RouteReason::kPrefix ? "prefix" : "ring"}})
        .inc();
    return route;
  }

  void on_cancel(const std::string& frontend, uint64_t client_id) {
    auto it = by_client.find({frontend, client_id});
    if (it == by_client.end()) return;  // unknown or already finished: nothing to answer
    const uint64_t id = it->second;
    auto w = workers.find(requests.at(id).worker);
    if (w != workers.end()) {
      auto fin = w->second.batcher->cancel(id);
      if (fin.ok()) {
        finish(*fin);
        return;
      }
    }
    protocol::FinalEvent f{.id = client_id, .finish_reason = "cancelled"};
    to_frontend(frontend, f);
    forget(id);
  }

  // ---- events out ----
  void emit(const scheduler::StepOutcome& out) {
    // One token event per request per step (a step samples at most one token per sequence).
    for (const auto& t : out.tokens) {
      auto it = requests.find(t.request_id);
      if (it == requests.end()) continue;
      Req& r = it->second;
      if (!r.got_token) {
        r.got_token = true;
        r.original.reset();  // streamed: no transparent re-queue from now on
        r.first_token = Clock::now();
        m.ttft_seconds->observe(ms_between(r.arrival, r.first_token) / 1000.0);
      }
      protocol::TokenEvent ev{.id = r.client_id, .tokens = {t.token}};
      ev.logprobs = {t.logprob};
      if (!t.top.empty()) ev.top_logprobs = {t.top};
      to_frontend(r.frontend, ev);
    }
    for (const auto& f : out.finished) finish(f);
  }

  void finish(const scheduler::FinishEvent& f) {
    auto it = requests.find(f.request_id);
    if (it == requests.end()) return;
    const Req& r = it->second;
    m.prompt_tokens->inc(f.usage.prompt_tokens);
    m.cached_tokens->inc(f.usage.cached_prompt_tokens);
    if (m.prompt_tokens->value() > 0) m.hit_rate->set(m.cached_tokens->value() / m.prompt_tokens->value());
    registry->counter("tessera_scheduler_requests_total", "requests ended, by finish reason",
                      {{"reason", std::string(scheduler::finish_reason_name(f.reason))}})
        .inc();
    if (f.reason == scheduler::FinishReason::kError) {
      fail_client(r.frontend, r.client_id, ErrorCode::kInternal, "worker '" + r.worker + "' failed the request: " + f.message);
      forget(f.request_id);
      return;
    }
    const auto now = Clock::now();
    protocol::FinalEvent ev{.id = r.client_id};
    switch (f.reason) {
      case scheduler::FinishReason::kStop: ev.finish_reason = "stop"; break;
      case scheduler::FinishReason::kCancelled: ev.finish_reason = "cancelled"; break;
      default: ev.finish_reason = "length"; break;
    }
    ev.usage = {.prompt_tokens = f.usage.prompt_tokens,
                .completion_tokens = f.usage.completion_tokens,
                .cached_tokens = f.usage.cached_prompt_tokens};
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
    to_frontend(r.frontend, ev);
    forget(f.request_id);
  }

  // ---- workers ----
  void read_workers() {
    for (int n = 0; n < 1024; ++n) {
      auto frames = zmqu::recv(workers_sock, true);
      if (!frames.ok() || frames->empty()) return;
      auto env = zmqu::parse_router(std::move(*frames));
      if (!env.ok()) {
        m.bad_worker->inc();
        TS_LOG(kWarn) << "worker socket: " << env.error().to_string();
        continue;
      }
      auto msg = protocol::decode(env->body);
      if (!msg.ok()) {
        m.bad_worker->inc();
        TS_LOG(kWarn) << "worker=" << env->identity << " | undecodable message: " << msg.error().to_string();
        continue;
      }
      on_worker(env->identity, std::move(*msg));
    }
  }

  void on_worker(const std::string& name, protocol::Message msg) {
    if (auto* reg = std::get_if<protocol::RegisterWorker>(&msg)) {
      on_register(name, *reg);
      return;
    }
    auto it = workers.find(name);
    if (it == workers.end()) return;  // not registered (e.g. we restarted): it re-registers on silence
    Worker& w = it->second;
    w.last_seen = Clock::now();
    if (auto* hb = std::get_if<protocol::Heartbeat>(&msg)) {
      to_worker(name, protocol::Heartbeat{.id = hb->id, .role = "scheduler", .name = config.name, .unix_ms = unix_ms(),
                                          .instance = instance});
    } else if (auto* res = std::get_if<protocol::StepResultMsg>(&msg)) {
      on_result(w, res->result);
    } else if (std::holds_alternative<protocol::Shutdown>(msg)) {
      worker_dead(name, "worker '" + name + "' shut down");
    } else {
      TS_LOG(kWarn) << "worker=" << name << " | ignoring '" << protocol::message_type(msg) << "'";
    }
  }

  void on_register(const std::string& name, const protocol::RegisterWorker& reg) {
    const std::string fp = hex64(reg.model_fingerprint);
    if (!fingerprint.empty() && fp != fingerprint && !(workers.size() == 1 && workers.count(name)) && !workers.empty()) {
      reject_worker(name, reg, "model fingerprint " + fp + " differs from the other workers' " + fingerprint);
      return;
    }
    // A worker registering again lost its link (or restarted) and dropped all request state: its
    // old requests are orphans, re-queued once it is back (on it or another worker).
    const std::string again = "worker '" + name + "' registered again (it lost its scheduler link)";
    std::vector<uint64_t> orphans = remove_worker(name, again);
    add_worker(name, reg);
    requeue(orphans, again);
  }

  void reject_worker(const std::string& name, const protocol::RegisterWorker& reg, const std::string& why) {
    TS_LOG(kWarn) << "worker=" << name << " | registration rejected: " << why;
    to_worker(name, protocol::RegisterAck{.id = reg.id, .accepted = false, .reason = why, .instance = instance});
  }

  // Builds the worker's Batcher and puts it on the ring; answers register_ack either way.
  void add_worker(const std::string& name, const protocol::RegisterWorker& reg) {
    auto reject = [&](const std::string& why) { reject_worker(name, reg, why); };
    const std::string fp = hex64(reg.model_fingerprint);
    scheduler::BatcherConfig bc;
    bc.page_size = reg.page_size;
    bc.num_pages = reg.num_pages;
    bc.max_context = config.max_context > 0 ? std::min(config.max_context, reg.max_seq_len) : reg.max_seq_len;
    bc.max_running = config.max_running;
    bc.max_step_tokens = config.max_step_tokens > 0 ? config.max_step_tokens : reg.max_batch_tokens;
    bc.max_step_tokens = std::max(bc.max_step_tokens, bc.max_running);
    bc.max_waiting = config.max_waiting;
    if (reg.eos_id >= 0) bc.eos_ids = {reg.eos_id};
    auto batcher = scheduler::Batcher::create(bc);
    if (!batcher.ok()) return reject(batcher.error().message);
    if (Status st = router.add_worker(name); !st.ok()) return reject(st.error().message);
    fingerprint = fp;
    fingerprint64 = reg.model_fingerprint;
    Worker w;
    w.name = name;
    w.info = reg;
    w.batcher = std::move(*batcher);
    w.last_seen = Clock::now();
    const metrics::Labels free_l{{"worker", name}, {"state", "free"}}, held_l{{"worker", name}, {"state", "held"}},
        cached_l{{"worker", name}, {"state", "cached"}};
    const std::string help = "K/V pages by state (free + held + cached = total)";
    w.free_pages = &registry->gauge("tessera_scheduler_pages", help, free_l);
    w.held_pages = &registry->gauge("tessera_scheduler_pages", help, held_l);
    w.cached_pages = &registry->gauge("tessera_scheduler_pages", help, cached_l);
    workers[name] = std::move(w);
    to_worker(name, protocol::RegisterAck{.id = reg.id, .accepted = true, .heartbeat_ms = config.heartbeat_ms,
                                                   .instance = instance});
    TS_LOG(kInfo) << "worker=" << name << " | registered: " << reg.num_pages << " pages x " << reg.page_size
                  << ", vocab " << reg.vocab_size << ", context " << bc.max_context << ", step budget "
                  << bc.max_step_tokens << ", model " << fp;
    publish();
  }

  void on_result(Worker& w, const StepResult& result) {
    if (!w.in_flight || result.step_id != w.step_id) {
      TS_LOG(kWarn) << "worker=" << w.name << " | unexpected step_result " << result.step_id << " (waiting for "
                    << (w.in_flight ? std::to_string(w.step_id) : std::string("none")) << ")";
      return;
    }
    w.in_flight = false;
    m.step_seconds->observe(ms_between(w.sent_at, Clock::now()) / 1000.0);
    m.compute_seconds->observe(result.compute_ms / 1000.0);
    if (result.error_code != 0) {
      TS_LOG(kWarn) << "worker=" << w.name << " | step " << result.step_id << " failed: " << result.error_message;
    }
    for (const FillResult& f : result.fills) {  // dki: provenance of preference K/V, for usage and metrics
      auto it = requests.find(f.request_id);
      if (it != requests.end()) it->second.fill = f;
      registry->counter("tessera_scheduler_preference_fills_total", "preference K/V fills executed by workers, by source",
                        {{"source", f.source}}).inc();
      registry->counter("tessera_scheduler_preference_kv_bytes_total",
                        "preference K/V bytes fetched from the kvstore (kvstore, redis) or computed (compute)",
                        {{"source", f.source}}).inc(static_cast<double>(f.kv_bytes));
      registry->counter("tessera_scheduler_preference_transfer_seconds_total",
                        "time spent getting, decoding and copying preference K/V from the kvstore").inc(f.transfer_ms / 1000.0);
    }
    auto out = w.batcher->apply(result);
    if (!out.ok()) {
      TS_LOG(kError) << "worker=" << w.name << " | apply: " << out.error().to_string();
      return;
    }
    audit(w);
    emit(*out);
  }

  void audit(const Worker& w) {
    if (!config.audit) return;
    Status st = w.batcher->check();
    TS_CHECK(st.ok()) << "worker=" << w.name << " batcher invariant broken: " << st.error().to_string();
  }

  // A worker is gone: forgets it, then re-queues its requests that have streamed nothing yet
  // and fails the others with kPeerDead.
  void worker_dead(const std::string& name, const std::string& why) { requeue(remove_worker(name, why), why); }

  // Forgets the worker (its batcher, ring place and gauges) and returns the ids of the requests
  // it held, which still exist and point at it; the caller must requeue() them.
  std::vector<uint64_t> remove_worker(const std::string& name, const std::string& why) {
    std::vector<uint64_t> ids;
    auto it = workers.find(name);
    if (it == workers.end()) return ids;
    TS_LOG(kWarn) << "worker=" << name << " | dead: " << why;
    for (const auto& [id, r] : requests)
      if (r.worker == name) ids.push_back(id);
    it->second.free_pages->set(0);
    it->second.held_pages->set(0);
    it->second.cached_pages->set(0);
    (void)router.remove_worker(name);
    workers.erase(it);
    if (workers.empty()) fingerprint.clear();
    publish();
    return ids;
  }

  // Requests orphaned by a dead worker: one that has not streamed a token yet goes to another
  // live worker as if it had just arrived (the client sees a normal answer, only later); one
  // that has, or that cannot be placed (no worker left, queues full, re-queued too often), ends
  // with an `error` kPeerDead.
  void requeue(const std::vector<uint64_t>& ids, const std::string& why) {
    constexpr int kMaxRequeues = 3;  // a request that kills its workers must not kill them all
    for (uint64_t id : ids) {
      auto it = requests.find(id);
      if (it == requests.end()) continue;
      Req& r = it->second;
      std::string lost = why + "; the request was lost";
      if (r.original && r.requeues < kMaxRequeues && !workers.empty()) {
        auto route = place(*r.original);
        if (route.ok()) {
          m.requeued->inc();
          ++r.requeues;
          TS_LOG(kInfo) << "req=" << id << " client=" << r.client_id << " | re-queued from worker=" << r.worker
                        << " on worker=" << route->worker << " (" << why << ")";
          r.worker = route->worker;
          r.was_scheduled = false;
          r.fill.reset();
          continue;
        }
        lost = why + "; re-queueing it failed: " + route.error().message;
      } else if (r.original && r.requeues >= kMaxRequeues) {
        lost = why + "; it was already re-queued " + std::to_string(r.requeues) + " times";
      }
      m.peer_dead->inc();
      fail_client(r.frontend, r.client_id, ErrorCode::kPeerDead, lost);
      forget(id);
    }
  }

  // Sends each idle worker its next plan.
  void drive() {
    for (auto& [name, w] : workers) {
      for (int guard = 0; guard < 4 && !w.in_flight && w.batcher->has_work(); ++guard) {
        auto plan = w.batcher->step();
        if (!plan.ok()) {
          TS_LOG(kError) << "worker=" << name << " | step: " << plan.error().to_string();
          break;
        }
        if (!scheduler::needs_worker(*plan)) {
          StepResult empty;
          empty.step_id = plan->step_id;
          auto out = w.batcher->apply(empty);
          if (out.ok()) emit(*out);
          continue;
        }
        const auto now = Clock::now();
        for (const auto& s : plan->seqs) {
          auto r = requests.find(s.request_id);
          if (r != requests.end() && !r->second.was_scheduled) {
            r->second.was_scheduled = true;
            r->second.scheduled = now;
          }
        }
        audit(w);
        w.step_id = plan->step_id;
        w.in_flight = true;
        w.sent_at = now;
        to_worker(name, protocol::StepPlanMsg{.id = plan->step_id, .plan = std::move(*plan)});
      }
    }
  }

  // ---- periodic ----
  void tick() {
    const auto now = Clock::now();
    std::vector<std::string> dead;
    for (const auto& [name, w] : workers)
      if (now - w.last_seen > milliseconds(config.worker_dead_ms)) dead.push_back(name);
    for (const auto& name : dead)
      worker_dead(name, "worker '" + name + "' stopped heartbeating (silent for more than " +
                            std::to_string(config.worker_dead_ms) + " ms)");
    std::vector<std::string> gone;
    for (const auto& [fe, seen] : frontend_seen)
      if (now - seen > milliseconds(config.frontend_dead_ms)) gone.push_back(fe);
    for (const auto& fe : gone) {
      frontend_seen.erase(fe);
      std::vector<std::pair<uint64_t, std::string>> ids;
      for (const auto& [id, r] : requests)
        if (r.frontend == fe) ids.emplace_back(id, r.worker);
      if (!ids.empty()) {
        TS_LOG(kWarn) << "frontend silent: cancelling its " << ids.size() << " requests";
      }
      for (const auto& [id, wname] : ids) {
        auto w = workers.find(wname);
        if (w != workers.end()) (void)w->second.batcher->cancel(id);
        forget(id);
      }
    }
    publish();
  }

  void publish() {
    int64_t running = 0, waiting = 0, preempt = 0;
    for (const auto& [name, w] : workers) {
      const auto c = w.batcher->pages().counts();
      w.free_pages->set(c.free);
      w.held_pages->set(c.held);
      w.cached_pages->set(c.cached);
      running += w.batcher->num_running();
      waiting += w.batcher->num_waiting();
      preempt += w.batcher->stats().preemptions;
    }
    m.live_workers->set(static_cast<double>(workers.size()));
    m.running->set(static_cast<double>(running));
    m.waiting->set(static_cast<double>(waiting));
    if (preempt > preemptions_seen) m.preemptions->inc(static_cast<double>(preempt - preemptions_seen));
    preemptions_seen = preempt;
  }

  void shutdown_all() {
    std::vector<uint64_t> ids;
    for (const auto& [id, r] : requests) ids.push_back(id);
    for (uint64_t id : ids) {
      const Req& r = requests.at(id);
      fail_client(r.frontend, r.client_id, ErrorCode::kUnavailable, "scheduler '" + config.name + "' is shutting down");
      forget(id);
    }
  }
};

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Service::~Service() = default;

Result<std::unique_ptr<Service>> Service::create(const ServiceConfig& config, metrics::Registry& registry) {
  if (config.heartbeat_ms < 1 || config.worker_dead_ms <= config.heartbeat_ms || config.frontend_dead_ms <= config.heartbeat_ms)
    return make_error(ErrorCode::kInvalidArgument, "need heartbeat-ms >= 1 and worker-dead-ms, frontend-dead-ms > heartbeat-ms");
  auto router = scheduler::Router::create(config.router);
  if (!router.ok()) return router.take_error();
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->registry = &registry;
  impl->router = std::move(*router);
  auto& r = registry;
  impl->m = Impl::Metrics{
      .live_workers = &r.gauge("tessera_scheduler_live_workers", "registered workers answering heartbeats"),
      .running = &r.gauge("tessera_scheduler_running_requests", "requests running (holding pages) over all workers"),
      .waiting = &r.gauge("tessera_scheduler_waiting_requests", "requests queued for admission over all workers"),
      .prompt_tokens = &r.counter("tessera_scheduler_prompt_tokens_total", "prompt tokens of ended requests"),
      .cached_tokens = &r.counter("tessera_scheduler_cached_prompt_tokens_total",
                                  "prompt tokens of ended requests whose K/V came from the prefix cache"),
      .hit_rate = &r.gauge("tessera_scheduler_prefix_cache_hit_rate",
                           "prefix-cache hit rate = cached prompt tokens / prompt tokens, over ended requests"),
      .step_seconds = &r.histogram("tessera_scheduler_step_seconds",
                                   "step round trip: plan sent -> result received", metrics::latency_buckets()),
      .compute_seconds = &r.histogram("tessera_scheduler_worker_compute_seconds",
                                      "worker time executing one step plan (from step_result)", metrics::latency_buckets()),
      .ttft_seconds = &r.histogram("tessera_scheduler_ttft_seconds", "request arrival at the scheduler -> first token",
                                   metrics::latency_buckets()),
      .bad_frontend = &r.counter("tessera_scheduler_bad_messages_total", "messages that failed to decode, by source",
                                 {{"source", "frontend"}}),
      .bad_worker = &r.counter("tessera_scheduler_bad_messages_total", "messages that failed to decode, by source",
                               {{"source", "worker"}}),
      .peer_dead = &r.counter("tessera_scheduler_peer_dead_requests_total", "requests failed because their worker died"),
      .requeued = &r.counter("tessera_scheduler_requeued_requests_total",
                             "requests moved to another worker because theirs died before their first token"),
      .preemptions = &r.counter("tessera_scheduler_preemptions_total", "sequences preempted (by recompute)"),
  };
  try {
    for (auto* s : {&impl->frontends, &impl->workers_sock}) {
      s->set(zmq::sockopt::linger, 0);
      s->set(zmq::sockopt::sndhwm, 1000000);
      s->set(zmq::sockopt::rcvhwm, 1000000);
    }
    impl->frontends.bind(config.frontend_endpoint);
    impl->workers_sock.bind(config.worker_endpoint);
    impl->frontend_bound = impl->frontends.get(zmq::sockopt::last_endpoint);
    impl->worker_bound = impl->workers_sock.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable, "cannot bind '" + config.frontend_endpoint + "' / '" +
                                                   config.worker_endpoint + "': " + e.what());
  }
  return std::unique_ptr<Service>(new Service(std::move(impl)));
}

std::string Service::frontend_endpoint() const { return impl_->frontend_bound; }
std::string Service::worker_endpoint() const { return impl_->worker_bound; }

void Service::run(const std::atomic<bool>& stop) {
  Impl& s = *impl_;
  auto next_tick = Clock::now();
  while (!stop.load()) {
    zmq::pollitem_t items[] = {{s.frontends.handle(), 0, ZMQ_POLLIN, 0}, {s.workers_sock.handle(), 0, ZMQ_POLLIN, 0}};
    auto wait = std::chrono::duration_cast<milliseconds>(next_tick - Clock::now());
    wait = std::clamp(wait, milliseconds(0), milliseconds(50));
    try {
      zmq::poll(items, 2, wait);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      TS_LOG(kError) << "zmq poll: " << e.what();
      break;
    }
    if (items[1].revents & ZMQ_POLLIN) s.read_workers();
    if (items[0].revents & ZMQ_POLLIN) s.read_frontends();
    s.drive();
    if (Clock::now() >= next_tick) {
      s.tick();
      next_tick = Clock::now() + milliseconds(std::min(s.config.heartbeat_ms, 250));
    }
  }
  s.shutdown_all();
}

}  // namespace tessera::scheduler_app
