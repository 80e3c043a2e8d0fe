// The ZAP handler and the server side of CURVE (curve.h).
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <zmq.hpp>

#include "tessera/common/curve.h"
#include "tessera/common/log.h"
#include "tessera/common/metrics.h"

namespace tessera::curve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kReloadEvery = std::chrono::seconds(1);
constexpr auto kLogEvery = std::chrono::seconds(10);
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

std::string roles_text(const std::vector<Role>& roles) {
  std::string s;
  for (Role r : roles) s += (s.empty() ? "" : ", ") + std::string(role_name(r)) + ".key / " + std::string(role_name(r)) + ".d/*.key";
  return s;
}

}  // namespace

// One allow-list per domain. Only the handler thread reads/writes `keys`, `loaded`,
// `last_log` and `unlogged`; `allow()` adds domains under `mu` (the thread looks them up under
// it too); the counters are atomics read by any thread.
struct Domain {
  Keys owner;
  std::vector<Role> roles;
  metrics::Counter* refused_counter = nullptr;
  std::set<std::string> keys;
  Clock::time_point loaded;
  Clock::time_point last_log{};
  uint64_t unlogged = 0;
  std::atomic<uint64_t> refused{0}, accepted{0};
};

// A server socket's handshake failures that never reach ZAP (a plain ZeroMQ peer, a wrong
// server key): its monitor's PAIR end, read by the handler thread.
struct Watch {
  std::string domain;
  zmq::socket_t events;
};

struct Authenticator::Impl {
  zmq::context_t& ctx;
  zmq::socket_t rep;
  std::atomic<bool> stop{false};
  mutable std::mutex mu;
  std::map<std::string, std::unique_ptr<Domain>, std::less<>> domains;  // GUARDED_BY(mu); entries never removed
  std::vector<std::unique_ptr<Watch>> watches;  // GUARDED_BY(mu); used by the handler thread only
  std::thread thread;

  explicit Impl(zmq::context_t& c) : ctx(c), rep(c, zmq::socket_type::rep) {}
  // Counts and (rate-limited) logs one refusal on `d`.
  void refuse(Domain& d, const std::string& domain_name, const std::string& address, const std::string& why);
  void read_monitor(Watch& w);
  Domain* find(std::string_view name) const {
    std::lock_guard lock(mu);
    auto it = domains.find(name);
    return it == domains.end() ? nullptr : it->second.get();
  }
  void run();
  // "200" or "400" for one request's fields.
  bool admit(const std::string& domain, const std::string& address, const std::string& mechanism,
             const std::string& credential);
};

bool Authenticator::Impl::admit(const std::string& domain_name, const std::string& address, const std::string& mechanism,
                                const std::string& credential) {
  Domain* d = find(domain_name);
  std::string key_text;
  if (mechanism == "CURVE" && credential.size() == 32) {
    char z85[41];
    if (zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(credential.data()), 32) != nullptr) key_text = z85;
  }
  if (d != nullptr && !key_text.empty()) {
    const auto now = Clock::now();
    if (now - d->loaded >= kReloadEvery) {
      d->loaded = now;
      auto fresh = d->owner.admitted(d->roles);
      if (fresh.ok()) {
        d->keys = std::set<std::string>(fresh->begin(), fresh->end());
      } else {
        TS_LOG(kError) << "CURVE allow-list of " << domain_name << " not reloaded (keeping the previous one): "
                       << fresh.error().message;
      }
    }
    if (d->keys.count(key_text) != 0) {
      d->accepted.fetch_add(1);
      return true;
    }
  }
  if (d == nullptr) {
    TS_LOG(kError) << "CURVE: handshake on an unknown ZAP domain '" << log::escape(domain_name, 64) << "': refused";
    return false;
  }
  refuse(*d, domain_name, address,
         key_text.empty() ? "mechanism " + log::escape(mechanism, 16) + " is not CURVE"
                          : "public key " + key_text + " is not in the allow-list");
  return false;
}

void Authenticator::Impl::refuse(Domain& d, const std::string& domain_name, const std::string& address,
                                 const std::string& why) {
  d.refused.fetch_add(1);
  if (d.refused_counter != nullptr) d.refused_counter->inc();
  ++d.unlogged;
  const auto now = Clock::now();
  if (d.last_log == Clock::time_point{} || now - d.last_log >= kLogEvery) {
    TS_LOG(kWarn) << "refused a peer on " << domain_name << " from " << log::escape(address, 80) << ": " << why << " ("
                  << d.unlogged << " refused since the last such line, " << d.refused.load() << " in all)";
    d.last_log = now;
    d.unlogged = 0;
  }
}

// One monitor event: [u16 event, u32 value][endpoint]. Handshakes that failed before ZAP.
void Authenticator::Impl::read_monitor(Watch& w) {
  zmq::message_t head, addr;
  if (!w.events.recv(head, zmq::recv_flags::dontwait)) return;
  if (!head.more() || !w.events.recv(addr, zmq::recv_flags::dontwait)) return;
  uint16_t event = 0;
  if (head.size() >= sizeof event) std::memcpy(&event, head.data(), sizeof event);
  if (event != ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && event != ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) return;
  Domain* d = find(w.domain);
  if (d != nullptr) refuse(*d, w.domain, addr.to_string(), "not a valid CURVE handshake (plain ZeroMQ, or a wrong server key)");
}

void Authenticator::Impl::run() {
  std::vector<zmq::pollitem_t> items;
  std::vector<Watch*> polled;
  while (!stop.load()) {
    try {
      items.assign(1, {rep.handle(), 0, ZMQ_POLLIN, 0});
      polled.clear();
      {
        std::lock_guard lock(mu);
        for (auto& w : watches) {
          items.push_back({w->events.handle(), 0, ZMQ_POLLIN, 0});
          polled.push_back(w.get());
        }
      }
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(100));
      for (size_t i = 0; i < polled.size(); ++i)
        if (items[i + 1].revents & ZMQ_POLLIN) read_monitor(*polled[i]);
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      std::vector<std::string> f;
      zmq::message_t m;
      do {
        if (!rep.recv(m, zmq::recv_flags::none)) break;
        f.emplace_back(static_cast<const char*>(m.data()), m.size());
      } while (m.more() && f.size() < 16);
      while (m.more()) (void)rep.recv(m, zmq::recv_flags::none);  // discard the rest of a malformed request
      // RFC 27: version, request id, domain, address, identity, mechanism, credentials...
      const bool well_formed = f.size() >= 6 && f[0] == "1.0";
      const bool ok = well_formed && admit(f[2], f[3], f[5], f.size() > 6 ? f[6] : std::string());
      const std::string request_id = f.size() > 1 ? f[1] : std::string();
      const std::string status = ok ? "200" : "400";
      const std::string text = ok ? "OK" : "unknown public key";
      const std::string user = ok ? "curve" : "";
      rep.send(zmq::buffer(std::string_view("1.0")), zmq::send_flags::sndmore);
      rep.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
      rep.send(zmq::buffer(status), zmq::send_flags::sndmore);
      rep.send(zmq::buffer(text), zmq::send_flags::sndmore);
      rep.send(zmq::buffer(user), zmq::send_flags::sndmore);
      rep.send(zmq::buffer(std::string_view()), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      if (e.num() == EINTR) continue;
      TS_LOG(kError) << "ZAP handler: " << e.what();
    }
  }
}

Authenticator::Authenticator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Authenticator::~Authenticator() {
  impl_->stop.store(true);
  if (impl_->thread.joinable()) impl_->thread.join();
}

Status Authenticator::watch(zmq::socket_t& socket, const std::string& domain) {
  const std::string endpoint = "inproc://tessera-zap-monitor-" + domain;
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(),
                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0) {
    return make_error(ErrorCode::kUnavailable, "cannot monitor the " + domain + " socket: " + zmq_strerror(zmq_errno()));
  }
  auto w = std::make_unique<Watch>(Watch{.domain = domain, .events = zmq::socket_t(impl_->ctx, zmq::socket_type::pair)});
  try {
    w->events.set(zmq::sockopt::linger, 0);
    w->events.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable, "cannot monitor the " + domain + " socket: " + e.what());
  }
  std::lock_guard lock(impl_->mu);  // hands the PAIR to the handler thread
  impl_->watches.push_back(std::move(w));
  return ok_status();
}

Result<std::unique_ptr<Authenticator>> Authenticator::start(zmq::context_t& ctx) {
  auto impl = std::make_unique<Impl>(ctx);
  try {
    impl->rep.set(zmq::sockopt::linger, 0);
    impl->rep.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable, std::string("cannot bind the ZAP handler: ") + e.what());
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<Authenticator>(new Authenticator(std::move(impl)));
}

Status Authenticator::allow(const std::string& domain, const Keys& keys, std::vector<Role> roles, metrics::Counter* refused) {
  TS_ASSIGN_OR_RETURN(std::vector<std::string> admitted, keys.admitted(roles));
  if (admitted.empty())
    return make_error(ErrorCode::kInvalidArgument, "CURVE: no public key to admit on " + domain + " in " + keys.dir() +
                                                       " (looked for " + roles_text(roles) + ")");
  auto d = std::make_unique<Domain>();
  d->owner = keys;
  d->roles = std::move(roles);
  d->refused_counter = refused;
  d->keys = std::set<std::string>(admitted.begin(), admitted.end());
  d->loaded = Clock::now();
  std::lock_guard lock(impl_->mu);
  if (impl_->domains.count(domain) != 0) return make_error(ErrorCode::kInvalidArgument, "ZAP domain " + domain + " declared twice");
  impl_->domains.emplace(domain, std::move(d));
  return ok_status();
}

uint64_t Authenticator::refused(std::string_view domain) const {
  const Domain* d = impl_->find(domain);
  return d ? d->refused.load() : 0;
}

uint64_t Authenticator::accepted(std::string_view domain) const {
  const Domain* d = impl_->find(domain);
  return d ? d->accepted.load() : 0;
}

Status serve(zmq::socket_t& socket, Authenticator* auth, const Keys& keys, const ServerSpec& spec) {
  if (!keys.secure()) return ok_status();
  if (auth == nullptr) return make_error(ErrorCode::kInvalidArgument, "CURVE server " + spec.domain + " without an Authenticator");
  TS_TRY(auth->allow(spec.domain, keys, spec.admit, spec.refused));
  TS_TRY(auth->watch(socket, spec.domain));
  try {
    socket.set(zmq::sockopt::zap_domain, spec.domain);
    socket.set(zmq::sockopt::curve_server, 1);
    socket.set(zmq::sockopt::curve_secretkey, keys.own().secret_key);
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable, "CURVE server setup of " + spec.domain + ": " + e.what());
  }
  return ok_status();
}

}  // namespace tessera::curve
