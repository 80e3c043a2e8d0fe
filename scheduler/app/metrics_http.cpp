#include "metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera::scheduler_app {
namespace {

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

std::string response(int status, const char* reason, const std::string& type, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& host, int port,
                                                            const metrics::Registry& registry) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_error(ErrorCode::kUnavailable, std::string("metrics socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    ::close(fd);
    return make_error(ErrorCode::kInvalidArgument, "metrics-host '" + host + "' is not an IPv4 address");
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0) {
    std::string err = std::strerror(errno);
    ::close(fd);
    return make_error(ErrorCode::kUnavailable, "cannot listen on " + host + ":" + std::to_string(port) + ": " + err);
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return std::unique_ptr<MetricsServer>(new MetricsServer(fd, ntohs(addr.sin_port), registry));
}

MetricsServer::MetricsServer(int fd, int port, const metrics::Registry& registry)
    : fd_(fd), port_(port), registry_(registry), thread_([this] { loop(); }) {}

MetricsServer::~MetricsServer() {
  stop_.store(true);
  thread_.join();
  ::close(fd_);
}

void MetricsServer::loop() {
  while (!stop_.load()) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    timeval tv{1, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::string req;
    char buf[2048];
    while (req.find("\r\n\r\n") == std::string::npos && req.size() < 16384) {
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      req.append(buf, static_cast<size_t>(n));
    }
    const size_t sp1 = req.find(' ');
    const size_t sp2 = sp1 == std::string::npos ? sp1 : req.find(' ', sp1 + 1);
    const std::string method = req.substr(0, sp1);
    std::string path = sp2 == std::string::npos ? "" : req.substr(sp1 + 1, sp2 - sp1 - 1);
    path = path.substr(0, path.find('?'));
    if (method == "GET" && path == "/metrics")
      write_all(c, response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", registry_.render()));
    else if (method == "GET" && path == "/health")
      write_all(c, response(200, "OK", "application/json", "{\"status\":\"ok\"}"));
    else
      write_all(c, response(404, "Not Found", "application/json", "{\"error\":\"not found: GET /metrics or /health\"}"));
    ::close(c);
  }
}

}  // namespace tessera::scheduler_app
