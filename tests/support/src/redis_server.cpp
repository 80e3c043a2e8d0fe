#include "tessera/testing/redis_server.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "tessera/testing/wait.h"

namespace tessera::testing {
namespace {

bool ping(const std::string& host, int port) {
  timeval tv{0, 200000};
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, tv);
  if (c == nullptr) return false;
  bool ok = false;
  if (c->err == 0) {
    redisSetTimeout(c, tv);
    auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
    ok = r != nullptr && r->type == REDIS_REPLY_STATUS && std::string(r->str, r->len) == "PONG";
    if (r != nullptr) freeReplyObject(r);
  }
  redisFree(c);
  return ok;
}

std::string reply_text(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_NIL: return "(nil)";
    case REDIS_REPLY_INTEGER: return std::to_string(r->integer);
    case REDIS_REPLY_ERROR: return std::string(r->str, r->len);
    case REDIS_REPLY_ARRAY: {
      std::string out;
      for (size_t i = 0; i < r->elements; ++i) {
        if (i) out += '\n';
        out += reply_text(r->element[i]);
      }
      return out;
    }
    default: return r->str != nullptr ? std::string(r->str, r->len) : std::string();
  }
}

}  // namespace

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

std::unique_ptr<RedisServer> RedisServer::start(std::chrono::milliseconds deadline) {
  std::unique_ptr<RedisServer> s(new RedisServer());
  for (int attempt = 0; attempt < 5; ++attempt) {
    s->port_ = free_loopback_port();
    if (s->port_ != 0 && s->spawn_and_wait(deadline)) return s;
  }
  std::fprintf(stderr, "RedisServer: could not start redis-server on a loopback port\n");
  return nullptr;
}

bool RedisServer::spawn_and_wait(std::chrono::milliseconds deadline) {
  const char* bin_env = std::getenv("TESSERA_REDIS_SERVER");
  const std::string bin = (bin_env != nullptr && *bin_env != '\0') ? bin_env : "redis-server";
  auto child = ChildProcess::spawn({.binary = bin,
                                    .args = {"--port", std::to_string(port_), "--bind", host_, "--save", "", "--appendonly",
                                             "no", "--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning",
                                             "--dir", "/tmp"},
                                    .stdout_to = ChildOutput::null(),
                                    .search_path = true});
  if (!child.ok()) {
    std::fprintf(stderr, "RedisServer: %s\n", child.error().to_string().c_str());
    return false;
  }
  child_ = std::move(child).value();
  // Ready when it answers PING; false when it exits first (port taken?).
  if (wait_until([&] { return ping(host_, port_) || !child_.running(); }, deadline) && child_.running()) return true;
  kill();
  return false;
}

RedisServer::~RedisServer() { kill(); }

void RedisServer::kill() {
  if (!child_.running()) return;
  (void)child_.signal(SIGKILL);
  (void)child_.wait();
}

bool RedisServer::restart(std::chrono::milliseconds deadline) {
  kill();
  const auto until = std::chrono::steady_clock::now() + deadline;
  // The port may linger briefly after the kill: try again until the deadline.
  return wait_until(
      [&] {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
        return left.count() > 0 && spawn_and_wait(left);
      },
      deadline, std::chrono::milliseconds(50));
}

std::string RedisServer::command(const std::vector<std::string>& argv) const {
  timeval tv{2, 0};
  redisContext* c = redisConnectWithTimeout(host_.c_str(), port_, tv);
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return "ERR cannot connect";
  }
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), ptrs.data(), lens.data()));
  std::string out = r != nullptr ? reply_text(r) : "ERR no reply";
  if (r != nullptr) freeReplyObject(r);
  redisFree(c);
  return out;
}

}  // namespace tessera::testing
