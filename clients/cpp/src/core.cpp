#include "core.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <zmq.hpp>

#include "tessera/common/protocol.h"
#include "wire.h"

namespace tessera::client::detail {
namespace {

std::string ms_text(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

void check_options(const ClientOptions& o) {
  if (o.endpoints.empty()) throw BadRequest(100, "invalid_argument", "ClientOptions::endpoints must not be empty");
  for (const auto& e : o.endpoints)
    if (e.empty()) throw BadRequest(100, "invalid_argument", "ClientOptions::endpoints has an empty endpoint");
  if (o.heartbeat_interval.count() <= 0 || o.dead_after <= o.heartbeat_interval)
    throw BadRequest(100, "invalid_argument",
                     "need 0 < heartbeat_interval < dead_after (got " + ms_text(o.heartbeat_interval) + ", " +
                         ms_text(o.dead_after) + ")");
  if (o.reconnect_interval.count() <= 0 || o.reconnect_interval_max < o.reconnect_interval)
    throw BadRequest(100, "invalid_argument", "need 0 < reconnect_interval <= reconnect_interval_max");
  if (o.send_queue_limit < 1) throw BadRequest(100, "invalid_argument", "send_queue_limit must be >= 1");
  if (!o.server_public_key.empty()) {
    if (!zmq_has("curve"))
      throw BadRequest(102, "unsupported", "server_public_key is set but this libzmq has no CURVE support");
    for (const auto* k : {&o.server_public_key, &o.client_public_key, &o.client_secret_key})
      if (!k->empty() && k->size() != 40)
        throw BadRequest(100, "invalid_argument", "CURVE keys are 40 Z85 characters (got " +
                                                      std::to_string(k->size()) + ")");
    if (o.client_public_key.empty() != o.client_secret_key.empty())
      throw BadRequest(100, "invalid_argument", "give both client_public_key and client_secret_key, or neither");
  } else if (!o.client_public_key.empty() || !o.client_secret_key.empty()) {
    throw BadRequest(100, "invalid_argument", "client CURVE keys need server_public_key");
  }
}

}  // namespace

// The state only the I/O thread touches.
class Core::Io {
 public:
  explicit Io(Core& core) : core_(core), ctx_(1) {}

  void loop() {
    connect();
    bool running = true;
    while (running) {
      auto now = Clock::now();
      if (now >= next_heartbeat_) {
        send(encode_heartbeat(++heartbeat_seq_));
        next_heartbeat_ = now + core_.options_.heartbeat_interval;
      }
      auto wake = std::min(next_heartbeat_, last_rx_ + core_.options_.dead_after);
      if (deadlines_ > 0)
        for (const auto& [id, p] : pending_)
          if (p.deadline && *p.deadline < wake) wake = *p.deadline;
      auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
      zmq_pollitem_t items[2] = {{sock_.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, core_.wake_fd_, ZMQ_POLLIN, 0}};
      int n = zmq_poll(items, 2, wait_ms < 0 ? 0 : static_cast<long>(wait_ms));
      if (n < 0 && zmq_errno() != EINTR) throw std::runtime_error(std::string("zmq_poll: ") + zmq_strerror(zmq_errno()));
      if (n > 0 && (items[1].revents & ZMQ_POLLIN)) running = drain_commands();
      if (n > 0 && (items[0].revents & ZMQ_POLLIN)) receive();
      now = Clock::now();
      if (deadlines_ > 0) expire(now);
      if (running && now - last_rx_ > core_.options_.dead_after) fail_over();
    }
    fail_all([](uint64_t id) { return make_error(0, "the client was closed", id, "closed"); });
  }

  // On an unexpected exception: end every request (the loop is gone).
  void fail_internal(const std::string& why) {
    fail_all([&](uint64_t id) { return make_error(500, "client I/O thread failed: " + why, id); });
  }

 private:
  void connect() {
    std::string endpoint;
    {
      std::lock_guard lock(core_.mu_);
      endpoint = core_.options_.endpoints[core_.endpoint_index_];
    }
    const ClientOptions& o = core_.options_;
    sock_ = zmq::socket_t(ctx_, zmq::socket_type::dealer);
    sock_.set(zmq::sockopt::linger, 0);
    sock_.set(zmq::sockopt::reconnect_ivl, static_cast<int>(o.reconnect_interval.count()));
    sock_.set(zmq::sockopt::reconnect_ivl_max, static_cast<int>(o.reconnect_interval_max.count()));
    sock_.set(zmq::sockopt::sndhwm, o.send_queue_limit);
    sock_.set(zmq::sockopt::rcvhwm, 0);  // never drop a reply: the I/O thread drains promptly
    sock_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(protocol::kMaxMessageBytes));
    if (!o.server_public_key.empty()) {
      std::string pub = o.client_public_key, sec = o.client_secret_key;
      if (pub.empty()) {
        char p[41], s[41];
        if (zmq_curve_keypair(p, s) != 0) throw std::runtime_error("zmq_curve_keypair failed");
        pub.assign(p, 40);
        sec.assign(s, 40);
      }
      sock_.set(zmq::sockopt::curve_serverkey, o.server_public_key);
      sock_.set(zmq::sockopt::curve_publickey, pub);
      sock_.set(zmq::sockopt::curve_secretkey, sec);
    }
    sock_.connect(endpoint);
    endpoint_ = endpoint;
    last_rx_ = Clock::now();  // a fresh connection gets dead_after to answer
    next_heartbeat_ = last_rx_;
  }

  bool send(const std::string& body) {
    try {
      return sock_.send(zmq::buffer(body), zmq::send_flags::dontwait).has_value();
    } catch (const zmq::error_t&) {
      return false;
    }
  }

  bool drain_commands() {
    uint64_t count = 0;
    [[maybe_unused]] ssize_t r = ::read(core_.wake_fd_, &count, sizeof count);
    std::vector<Command> cmds;
    {
      std::lock_guard lock(core_.mu_);
      cmds.swap(core_.commands_);
    }
    for (auto& c : cmds) {
      switch (c.kind) {
        case Command::kSend:
          if (send(c.body)) {
            if (c.pending.deadline) ++deadlines_;
            pending_.emplace(c.id, std::move(c.pending));
          } else {
            c.pending.sink->error(make_error(400, "the send queue to " + endpoint_ +
                                                      " is full (frontend not reachable)", c.id));
          }
          break;
        case Command::kCancel:
          if (pending_.count(c.id)) send(encode_cancel(c.id));
          break;
        case Command::kClose: {
          std::vector<Command> rest;
          {
            std::lock_guard lock(core_.mu_);
            core_.closed_ = true;
            rest.swap(core_.commands_);
            core_.limits_cv_.notify_all();
          }
          for (auto& r2 : rest)
            if (r2.kind == Command::kSend)
              r2.pending.sink->error(make_error(0, "the client is closed", r2.id, "closed"));
          return false;
        }
      }
    }
    return true;
  }

  void receive() {
    for (;;) {
      zmq::message_t msg;
      bool got = false;
      try {
        // A DEALER receives [body]; take the last frame of a multipart message.
        for (;;) {
          if (!sock_.recv(msg, zmq::recv_flags::dontwait)) break;
          got = true;
          if (!msg.more()) break;
        }
      } catch (const zmq::error_t&) {
        return;
      }
      if (!got) return;
      last_rx_ = Clock::now();
      on_message(std::string_view(static_cast<const char*>(msg.data()), msg.size()));
    }
  }

  void on_message(std::string_view bytes) {
    auto decoded = protocol::decode(bytes);
    if (!decoded.ok()) return;  // an undecodable reply is dropped, as the protocol does
    protocol::Message& m = decoded.value();
    if (auto* hb = std::get_if<protocol::Heartbeat>(&m)) {
      Limits lim = to_public(*hb, endpoint_);
      std::lock_guard lock(core_.mu_);
      core_.limits_ = std::move(lim);
      core_.limits_cv_.notify_all();
      return;
    }
    const uint64_t id = protocol::message_id(m);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;  // ended here already (deadline), or an id-0 error
    Pending& p = it->second;
    if (auto* t = std::get_if<protocol::TokenEvent>(&m)) {
      TokenEvent ev = to_public(std::move(*t));
      if (p.streaming) append(p.acc, ev);
      p.sink->token(std::move(ev));
    } else if (auto* f = std::get_if<protocol::FinalEvent>(&m)) {
      Completion c;
      if (p.streaming) {
        c = std::move(p.acc);
        finish(c, std::move(*f));
      } else {
        c = to_public(std::move(*f), p.want_logprobs, p.want_top_logprobs);
      }
      auto sink = std::move(p.sink);
      erase(it);
      sink->final(std::move(c));
    } else if (auto* e = std::get_if<protocol::ErrorEvent>(&m)) {
      auto sink = std::move(p.sink);
      erase(it);
      sink->error(make_error(static_cast<int>(e->code), std::move(e->message), id));
    }
  }

  void erase(std::unordered_map<uint64_t, Pending>::iterator it) {
    if (it->second.deadline) --deadlines_;
    pending_.erase(it);
  }

  void expire(Clock::time_point now) {
    std::vector<uint64_t> late;
    for (const auto& [id, p] : pending_)
      if (p.deadline && *p.deadline <= now) late.push_back(id);
    for (uint64_t id : late) {
      auto it = pending_.find(id);
      auto sink = std::move(it->second.sink);
      erase(it);
      send(encode_cancel(id));  // the server frees the request's pages
      sink->error(make_error(203, "request " + std::to_string(id) + " ran past its deadline", id));
    }
  }

  void fail_over() {
    const std::string dead = endpoint_;
    const auto after = core_.options_.dead_after;
    fail_all([&](uint64_t id) {
      return make_error(401, "frontend " + dead + " did not answer heartbeats for " + ms_text(after), id);
    });
    sock_.close();
    {
      std::lock_guard lock(core_.mu_);
      core_.endpoint_index_ = (core_.endpoint_index_ + 1) % core_.options_.endpoints.size();
      core_.limits_.reset();
    }
    core_.failovers_.fetch_add(1);
    connect();
  }

  template <class Make>
  void fail_all(Make make) {
    auto pending = std::move(pending_);
    pending_.clear();
    deadlines_ = 0;
    for (auto& [id, p] : pending) p.sink->error(make(id));
  }

  Core& core_;
  zmq::context_t ctx_;
  zmq::socket_t sock_;
  std::string endpoint_;
  std::unordered_map<uint64_t, Pending> pending_;
  size_t deadlines_ = 0;  // entries of pending_ with a deadline
  uint64_t heartbeat_seq_ = 0;
  Clock::time_point last_rx_{};
  Clock::time_point next_heartbeat_{};
};

Core::Core(ClientOptions options) : options_(std::move(options)) {
  check_options(options_);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw InternalError(500, "internal", std::string("eventfd: ") + std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

Core::~Core() {
  close();
  join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Core::run() {
  pthread_setname_np(pthread_self(), "tessera-client");
  Io io(*this);
  try {
    io.loop();
  } catch (const std::exception& e) {
    io.fail_internal(e.what());  // a bug must not leave callers waiting
  }
  std::vector<Command> rest;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    rest.swap(commands_);
    limits_cv_.notify_all();
  }
  for (auto& c : rest)
    if (c.kind == Command::kSend) c.pending.sink->error(make_error(0, "the client is closed", c.id, "closed"));
}

void Core::push(Command cmd) {
  bool wake = false;
  {
    std::unique_lock lock(mu_);
    if (closed_) {
      lock.unlock();  // the sink may run a caller's handler
      if (cmd.kind == Command::kSend) cmd.pending.sink->error(make_error(0, "the client is closed", cmd.id, "closed"));
      return;
    }
    wake = commands_.empty();
    commands_.push_back(std::move(cmd));
  }
  if (wake) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(wake_fd_, &one, sizeof one);
  }
}

void Core::submit(uint64_t id, std::string body, Pending pending) {
  push(Command{.kind = Command::kSend, .id = id, .body = std::move(body), .pending = std::move(pending)});
}

void Core::cancel(uint64_t id) { push(Command{.kind = Command::kCancel, .id = id, .body = {}, .pending = {}}); }

void Core::close() {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
  }
  push(Command{.kind = Command::kClose, .id = 0, .body = {}, .pending = {}});
  join();
}

void Core::join() {
  std::lock_guard lock(join_mu_);
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id())
    thread_.detach();  // closed from a handler on the I/O thread: the loop ends by itself
  else
    thread_.join();
}

Limits Core::limits(std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  const auto end = Clock::now() + wait;
  while (!limits_) {
    if (closed_) throw ClientClosed(0, "closed", "the client is closed");
    if (limits_cv_.wait_until(lock, end) == std::cv_status::timeout && !limits_) {
      throw Unavailable(400, "unavailable", "no heartbeat reply from " + options_.endpoints[endpoint_index_] +
                                                " within " + ms_text(wait));
    }
  }
  return *limits_;
}

std::string Core::endpoint() const {
  std::lock_guard lock(mu_);
  return options_.endpoints[endpoint_index_];
}

}  // namespace tessera::client::detail
