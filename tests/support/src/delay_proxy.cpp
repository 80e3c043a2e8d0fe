#include "tessera/testing/delay_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <list>
#include <string>
#include <utility>
#include <vector>

namespace tessera::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxQueued = size_t{64} << 20;
constexpr size_t kReadChunk = size_t{256} << 10;

// Bytes read from one side, waiting to be written to the other.
struct Direction {
  struct Chunk {
    Clock::time_point due;
    std::string bytes;
  };
  std::deque<Chunk> queue;
  size_t head_offset = 0;  // of queue.front() already written
  size_t queued = 0;
  bool eof = false;        // the source side has closed its write half
  bool shut = false;       // and that reached the destination (shutdown SHUT_WR)
  bool ready(Clock::time_point now) const { return !queue.empty() && queue.front().due <= now; }
};

struct Link {
  int fd[2] = {-1, -1};  // 0 = the accepted client, 1 = the upstream
  Direction dir[2];       // dir[s]: read from fd[s], written to fd[1 - s]
  bool failed = false;
  uint64_t gate_epoch = 0;  // the hold that since_gate counts for
  size_t since_gate = 0;    // bytes written upstream since then
  int id = 0;             // the connection's number (accept order), for the observer
  bool done() const { return failed || (dir[0].shut && dir[1].shut); }
};

void set_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

std::unique_ptr<DelayProxy> DelayProxy::start(const std::string& target_host, int target_port,
                                              std::chrono::microseconds rtt, Observer observer) {
  std::unique_ptr<DelayProxy> p(new DelayProxy());
  p->host_ = target_host;
  p->target_port_ = target_port;
  p->half_ = rtt / 2;
  p->observer_ = std::move(observer);
  p->listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (p->listen_fd_ < 0 || bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(p->listen_fd_, 64) != 0 || getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      pipe(p->wake_) != 0) {
    std::perror("DelayProxy: listen");
    return nullptr;
  }
  p->port_ = ntohs(addr.sin_port);
  p->thread_ = std::thread([raw = p.get()] { raw->loop(); });
  return p;
}

void DelayProxy::wake(char why) { (void)!write(wake_[1], &why, 1); }

void DelayProxy::hold_upstream_after(size_t bytes) {
  gate_bytes_.store(bytes);
  gate_epoch_.fetch_add(1);
  gate_open_.store(false);
}

void DelayProxy::release() {
  gate_open_.store(true);
  wake('g');
}

DelayProxy::~DelayProxy() {
  if (thread_.joinable()) {
    wake('x');
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void DelayProxy::loop() {
  std::list<Link> links;
  struct CloseAll {
    std::list<Link>& links;
    ~CloseAll() {
      for (Link& l : links) {
        close(l.fd[0]);
        close(l.fd[1]);
      }
    }
  } close_all{links};
  auto connect_upstream = [&]() -> int {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (fd < 0 || inet_pton(AF_INET, host_.c_str(), &to.sin_addr) != 1 ||
        connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
      if (fd >= 0) close(fd);
      return -1;
    }
    return fd;
  };
  // How many bytes the gate lets `l` write upstream now (dir[0]; SIZE_MAX while open).
  auto allowance = [&](Link& l) -> size_t {
    if (gate_open_.load()) return SIZE_MAX;
    const uint64_t epoch = gate_epoch_.load();
    if (l.gate_epoch != epoch) {
      l.gate_epoch = epoch;
      l.since_gate = 0;
    }
    const size_t limit = gate_bytes_.load();
    return l.since_gate >= limit ? 0 : limit - l.since_gate;
  };
  while (true) {
    const Clock::time_point now = Clock::now();
    std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    int timeout_ms = -1;
    for (Link& l : links) {
      for (int s = 0; s < 2; ++s) {
        short ev = 0;
        if (!l.dir[s].eof && l.dir[s].queued < kMaxQueued) ev |= POLLIN;
        if (l.dir[1 - s].ready(now) && (s == 0 || allowance(l) > 0)) ev |= POLLOUT;
        fds.push_back({l.fd[s], ev, 0});
        const Direction& d = l.dir[s];
        if (!d.queue.empty() && d.queue.front().due > now) {
          const auto wait = std::chrono::ceil<std::chrono::milliseconds>(d.queue.front().due - now).count();
          timeout_ms = timeout_ms < 0 ? static_cast<int>(wait) : std::min(timeout_ms, static_cast<int>(wait));
        }
      }
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) {  // the destructor ('x'), or the gate changed ('g')
      char why[64];
      const ssize_t n = read(wake_[0], why, sizeof(why));
      if (n <= 0 || std::find(why, why + n, 'x') != why + n) return;
    }
    if ((fds[1].revents & POLLIN) != 0) {
      const int c = accept(listen_fd_, nullptr, nullptr);
      if (c >= 0) {
        const int u = connect_upstream();
        if (u < 0) {
          close(c);
        } else {
          set_nonblocking(c);
          set_nonblocking(u);
          links.emplace_back();
          links.back().fd[0] = c;
          links.back().fd[1] = u;
          links.back().id = connections_.fetch_add(1);
        }
      }
    }
    size_t at = 2;
    for (Link& l : links) {
      if (at + 2 > fds.size() || fds[at].fd != l.fd[0]) break;  // accepted this round: next round
      for (int s = 0; s < 2; ++s, ++at) {
        const short re = fds[at].revents;
        Direction& in = l.dir[s];
        if ((re & (POLLIN | POLLHUP | POLLERR)) != 0 && !in.eof && in.queued < kMaxQueued) {
          std::string buf(kReadChunk, '\0');
          const ssize_t n = read(l.fd[s], buf.data(), buf.size());
          if (n > 0) {
            buf.resize(static_cast<size_t>(n));
            if (observer_) observer_(l.id, s == 0, buf);
            in.queued += buf.size();
            in.queue.push_back({Clock::now() + half_, std::move(buf)});
          } else if (n == 0) {
            in.eof = true;
          } else if (errno != EAGAIN && errno != EINTR) {
            l.failed = true;
          }
        }
      }
    }
    // Writes whatever is due (whether or not poll saw POLLOUT: a non-blocking write just fails).
    const Clock::time_point after = Clock::now();
    for (Link& l : links) {
      for (int s = 0; s < 2 && !l.failed; ++s) {
        Direction& d = l.dir[s];
        const int to = l.fd[1 - s];
        size_t allowed = s == 0 ? allowance(l) : SIZE_MAX;
        while (d.ready(after) && allowed > 0) {
          const std::string& b = d.queue.front().bytes;
          const size_t len = std::min(b.size() - d.head_offset, allowed);
          const ssize_t n = send(to, b.data() + d.head_offset, len, MSG_NOSIGNAL);
          if (n < 0) {
            if (errno != EAGAIN && errno != EINTR) l.failed = true;
            break;
          }
          if (s == 0) {
            l.since_gate += static_cast<size_t>(n);
            if (allowed != SIZE_MAX) allowed -= static_cast<size_t>(n);
          }
          d.head_offset += static_cast<size_t>(n);
          if (d.head_offset == b.size()) {
            d.queued -= b.size();
            d.queue.pop_front();
            d.head_offset = 0;
          }
        }
        if (d.eof && d.queue.empty() && !d.shut) {
          shutdown(to, SHUT_WR);
          d.shut = true;
        }
      }
    }
    size_t held = 0;
    if (!gate_open_.load()) {
      for (Link& l : links) {
        if (allowance(l) == 0) held += l.dir[0].queued - l.dir[0].head_offset;
      }
    }
    held_bytes_.store(held);
    for (auto it = links.begin(); it != links.end();) {
      if (it->done()) {
        close(it->fd[0]);
        close(it->fd[1]);
        it = links.erase(it);
      } else {
        ++it;
      }
    }
  }
}

}  // namespace tessera::testing
