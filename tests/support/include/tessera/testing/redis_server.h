// A real redis-server for tests: started on a free loopback port with no persistence
// (--save '' --appendonly no), ready when it answers PING (waited for with a deadline), and
// killable/restartable mid-test (on the same port, so clients can reconnect).
//
//   auto redis = RedisServer::start();           // aborts the test run with a message if it can't
//   ... use redis->host(), redis->port() ...
//   redis->kill();  ... redis->restart();
//
// Ownership: the object owns the child process (common's ChildProcess); the destructor kills it
// (SIGKILL) and reaps it.
// Not thread-safe; use from the test's thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessera/common/child_process.h"

namespace tessera::testing {

class RedisServer {
 public:
  // Starts redis-server (from PATH, or $TESSERA_REDIS_SERVER) on a free 127.0.0.1 port.
  // Returns nullptr (after printing why) when no server could be started.
  static std::unique_ptr<RedisServer> start(std::chrono::milliseconds deadline = std::chrono::seconds(10));
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }  // "127.0.0.1:PORT"
  bool running() { return child_.running(); }

  // SIGKILL and reap; the port stops answering.
  void kill();
  // Starts again on the same port (data is gone: no persistence). False if it did not answer.
  bool restart(std::chrono::milliseconds deadline = std::chrono::seconds(10));

  // Runs one command over a fresh connection; the reply as text ("(nil)", integers in decimal,
  // arrays joined by '\n'). Errors come back as "ERR ...". For test set-up and inspection.
  std::string command(const std::vector<std::string>& argv) const;

 private:
  RedisServer() = default;
  bool spawn_and_wait(std::chrono::milliseconds deadline);

  std::string host_ = "127.0.0.1";
  int port_ = 0;
  ChildProcess child_;
};

// A currently free TCP port on 127.0.0.1 (bind to port 0, read it, close). Racy by nature;
// callers retry on a bind failure.
int free_loopback_port();

}  // namespace tessera::testing
