#include "harness.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>

#include <zmq.hpp>

#include "tessera/common/check.h"
#include "tessera/common/zmq_util.h"
#include "tessera/http/client.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/wait.h"

namespace tessera::testing {

// ---- HTTP ----------------------------------------------------------------------------------
// Requests go through the one HTTP client (tessera/http/client.h, deadlines on every read).
// raw_exchange sends bytes that are not HTTP at all: a plain POSIX socket with poll() deadlines.

namespace {

class Conn {
 public:
  Conn(int port, int timeout_ms) : deadline_(std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~Conn() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  bool send_all(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      if (!wait(POLLOUT)) return false;
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Appends what arrives to buf_; false on EOF, error or deadline.
  bool fill() {
    if (!wait(POLLIN)) return false;
    char tmp[16384];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  std::string& buf() { return buf_; }

 private:
  bool wait(short events) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, events, 0};
    return poll(&p, 1, static_cast<int>(left)) > 0;
  }
  int fd_ = -1;
  std::string buf_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace

HttpResult http_request(int port, const std::string& method, const std::string& target, const std::string& body, int timeout_ms) {
  HttpResult out;
  auto r = http::request({.port = port, .method = method, .path = target, .body = body, .timeout_ms = timeout_ms});
  if (!r.ok()) {
    out.error = r.error().to_string();
    return out;
  }
  out.status = r->status;
  out.body = std::move(r->body);
  out.content_type = std::move(r->content_type);
  return out;
}

std::string raw_exchange(int port, const std::string& bytes, int timeout_ms) {
  Conn c(port, timeout_ms);
  if (!c.ok() || !c.send_all(bytes)) return "";
  while (c.fill()) {
  }
  return c.buf();
}

void send_then_close(int port, const std::string& bytes, const std::function<void()>& before_close) {
  Conn c(port, 15000);
  if (!c.ok() || !c.send_all(bytes)) return;
  before_close();
}  // ~Conn closes

bool wait_status(int port, const std::string& path, int status, std::chrono::milliseconds timeout) {
  return wait_until([&] { return http_request(port, "GET", path, "", 2000).status == status; }, timeout,
                    std::chrono::milliseconds(20));
}

std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    std::string ev = body.substr(pos, end - pos);
    if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
    pos = end + 2;
  }
  return out;
}

// ---- FakeScheduler -------------------------------------------------------------------------

FakeScheduler::FakeScheduler() {
  auto* ctx = new zmq::context_t(1);
  auto* sock = new zmq::socket_t(*ctx, zmq::socket_type::router);
  sock->set(zmq::sockopt::linger, 0);
  // A CURVE server with the scheduler's key of the test key set, like the real one.
  auto keys = curve::Keys::load({.dir = curve_dir()}, curve::Role::kScheduler);
  TS_CHECK(keys.ok());
  auth_ = std::move(curve::Authenticator::start(*ctx).value());
  TS_CHECK(curve::serve(*sock, auth_.get(), *keys, {.domain = "frontends", .admit = {curve::Role::kFrontend}}).ok());
  sock->bind("tcp://127.0.0.1:*");
  endpoint_ = sock->get(zmq::sockopt::last_endpoint);
  context_ = ctx;
  socket_ = sock;
  thread_ = std::thread([this] { run(); });
}

FakeScheduler::~FakeScheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  thread_.join();
  delete static_cast<zmq::socket_t*>(socket_);
  auth_.reset();
  delete static_cast<zmq::context_t*>(context_);
}

void FakeScheduler::set_script(std::vector<int32_t> tokens, int32_t cached_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  script_ = std::move(tokens);
  cached_ = cached_tokens;
}
void FakeScheduler::set_hold(bool hold, size_t after) {
  std::lock_guard<std::mutex> lock(mu_);
  hold_ = hold;
  hold_after_ = after;
}
void FakeScheduler::set_trickle(bool trickle) {
  std::lock_guard<std::mutex> lock(mu_);
  trickle_ = trickle;
}
void FakeScheduler::set_live_workers(int32_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  live_workers_ = n;
}
void FakeScheduler::set_silent(bool silent) {
  std::lock_guard<std::mutex> lock(mu_);
  silent_ = silent;
}
void FakeScheduler::fail_with_peer_dead(size_t nth) {
  std::lock_guard<std::mutex> lock(mu_);
  peer_dead_.insert(nth);
}
std::vector<protocol::GenerateRequest> FakeScheduler::requests() {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}
std::vector<uint64_t> FakeScheduler::cancels() {
  std::lock_guard<std::mutex> lock(mu_);
  return cancels_;
}
bool FakeScheduler::wait_for(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, pred);
}

void FakeScheduler::send(const std::string& identity, const protocol::Message& m) {
  (void)zmqu::send(*static_cast<zmq::socket_t*>(socket_), {identity, protocol::encode(m)}, true);
}

void FakeScheduler::run() {
  auto& sock = *static_cast<zmq::socket_t*>(socket_);
  for (;;) {
    zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(10));
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_) return;
    if (trickle_ && !silent_ && !script_.empty()) {
      for (auto& [id, held] : held_) {
        send(held.first, protocol::TokenEvent{.id = id, .tokens = {script_[static_cast<size_t>(held.second) % script_.size()]}});
        ++held.second;
      }
    }
    if (!(item.revents & ZMQ_POLLIN)) continue;
    auto frames = zmqu::recv(sock, true);
    if (!frames.ok() || frames->size() != 2) continue;
    if (silent_) continue;
    const std::string identity = (*frames)[0];
    auto msg = protocol::decode((*frames)[1]);
    if (!msg.ok()) continue;
    if (auto* hb = std::get_if<protocol::Heartbeat>(&*msg)) {
      send(identity, protocol::Heartbeat{.id = hb->id, .role = "scheduler", .name = "fake", .live_workers = live_workers_,
                                         .running = static_cast<int32_t>(held_.size())});
    } else if (auto* req = std::get_if<protocol::GenerateRequest>(&*msg)) {
      requests_.push_back(*req);
      request_count_.store(requests_.size());
      const size_t n = std::min<size_t>(script_.size(), static_cast<size_t>(req->max_tokens));
      const size_t upto = hold_ ? std::min(n, hold_after_) : n;
      for (size_t i = 0; i < upto; ++i) send(identity, protocol::TokenEvent{.id = req->id, .tokens = {script_[i]}});
      if (peer_dead_.count(requests_.size() - 1) != 0) {
        send(identity, protocol::ErrorEvent{.id = req->id, .code = ErrorCode::kPeerDead,
                                            .message = "worker 'w0' stopped heartbeating (fake)"});
      } else if (hold_) {
        held_[req->id] = {identity, static_cast<int32_t>(upto)};
      } else {
        send(identity, protocol::FinalEvent{.id = req->id,
                                            .finish_reason = n == static_cast<size_t>(req->max_tokens) ? "length" : "stop",
                                            .usage = {.prompt_tokens = static_cast<int32_t>(req->prompt_tokens.size()),
                                                      .completion_tokens = static_cast<int32_t>(n),
                                                      .cached_tokens = cached_}});
      }
    } else if (auto* c = std::get_if<protocol::CancelRequest>(&*msg)) {
      cancels_.push_back(c->id);
      cancel_count_.store(cancels_.size());
      auto it = held_.find(c->id);
      if (it != held_.end()) {
        send(it->second.first, protocol::FinalEvent{.id = c->id, .finish_reason = "cancelled",
                                                    .usage = {.completion_tokens = it->second.second}});
        held_.erase(it);
      }
    }
    cv_.notify_all();
  }
}

}  // namespace tessera::testing
