// Test harness for the frontend integration tests (the binary is started with tests/support's
// Process): blocking HTTP requests on the one HTTP client (tessera/http/client.h; deadlines,
// so a hung server fails the test instead of hanging it), and a FAKE SCHEDULER — a ZeroMQ ROUTER in the test process that speaks protocol v1 and
// answers scripted tokens. Tests using the fake scheduler are protocol-level tests of the
// frontend; end-to-end tests with the real scheduler and worker live elsewhere.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tessera/common/curve.h"
#include "tessera/common/protocol.h"
#include "tessera/testing/process.h"

namespace tessera::testing {

struct HttpResult {
  int status = 0;  // 0 = transport failure
  std::string body;
  std::string content_type;
  std::string error;
};

HttpResult http_request(int port, const std::string& method, const std::string& target, const std::string& body = "",
                        int timeout_ms = 15000);
// Sends raw bytes on a fresh connection and returns whatever comes back until close/timeout.
std::string raw_exchange(int port, const std::string& bytes, int timeout_ms = 5000);
// Sends raw bytes on a fresh connection, calls before_close() (which may wait on an event), then
// closes the connection without reading anything.
void send_then_close(int port, const std::string& bytes, const std::function<void()>& before_close);
// Polls GET path until it answers `status` or the deadline passes.
bool wait_status(int port, const std::string& path, int status, std::chrono::milliseconds timeout);

// Server-sent events of a response body: the payloads after "data: ".
std::vector<std::string> sse_data(const std::string& body);

class FakeScheduler {
 public:
  FakeScheduler();
  ~FakeScheduler();
  const std::string& endpoint() const { return endpoint_; }

  // Tokens answered to every request (at most max_tokens of them), then a final event.
  void set_script(std::vector<int32_t> tokens, int32_t cached_tokens = 0);
  // Hold requests open after `after` tokens until cancelled.
  void set_hold(bool hold, size_t after = 2);
  // With hold: keep sending held requests one more script token (cycling) every ~10 ms until
  // cancelled, past max_tokens (a generation that never goes quiet).
  void set_trickle(bool trickle);
  void set_live_workers(int32_t n);
  // Stop answering anything (as if the process froze or died).
  void set_silent(bool silent);
  // The request that arrives `nth` (0 = the first) gets its tokens, then a peer_dead error
  // instead of its final event (as if its worker died).
  void fail_with_peer_dead(size_t nth);

  std::vector<protocol::GenerateRequest> requests();
  std::vector<uint64_t> cancels();
  // Waits (condition variable, deadline) until pred() holds. pred runs under the state lock:
  // use only request_count() / cancel_count() in it (lock-free).
  bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds timeout);
  size_t request_count() const { return request_count_.load(); }
  size_t cancel_count() const { return cancel_count_.load(); }

 private:
  void run();
  void send(const std::string& identity, const protocol::Message& m);

  std::string endpoint_;
  std::thread thread_;
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> script_;
  int32_t cached_ = 0;
  bool hold_ = false;
  size_t hold_after_ = 2;
  bool trickle_ = false;
  int32_t live_workers_ = 1;
  bool silent_ = false;
  std::set<size_t> peer_dead_;  // arrival numbers of the requests fail_with_peer_dead() names
  std::vector<protocol::GenerateRequest> requests_;
  std::vector<uint64_t> cancels_;
  std::atomic<size_t> request_count_{0};
  std::atomic<size_t> cancel_count_{0};
  std::map<uint64_t, std::pair<std::string, int32_t>> held_;  // id -> (identity, tokens sent)
  void* socket_ = nullptr;  // zmq::socket_t*, owned by the thread
  void* context_ = nullptr;
  std::unique_ptr<curve::Authenticator> auth_;  // ZAP handler of context_ (test key set)
};

}  // namespace tessera::testing
