// The connection engine behind Client (client.h has the threading model).
//
// Ownership: Core owns the ZeroMQ context, the I/O thread and (on that thread only) the DEALER
// socket and the table of requests in flight. Callers reach the I/O thread through `commands_`
// (guarded by `mu_`) and an eventfd the thread polls beside the socket; the eventfd is written
// only when the queue turns non-empty, so a burst of submissions costs one wake-up.
// Invariants: every submitted request gets exactly one terminal delivery on its Sink (final or
// error); after close() no request is accepted (it ends with ClientClosed at once); a Sink is
// only ever called from the I/O thread, or from submit() when the client is already closed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tessera/client/client.h"

namespace tessera::client::detail {

using Clock = std::chrono::steady_clock;

// Where a request's events go. Called on the I/O thread; must not block.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void token(TokenEvent&& ev) = 0;
  virtual void final(Completion&& c) = 0;
  virtual void error(std::exception_ptr e) = 0;
};

struct Pending {
  std::shared_ptr<Sink> sink;
  bool streaming = false;
  bool want_logprobs = false;
  bool want_top_logprobs = false;
  std::optional<Clock::time_point> deadline;
  Completion acc;  // streaming: the concatenation of the events so far
};

// The typed error for a protocol code, as an exception_ptr (errors.cpp).
std::exception_ptr make_error(int code, std::string message, uint64_t request_id, std::string name = "");

class Core {
 public:
  explicit Core(ClientOptions options);  // validates (BadRequest), starts the I/O thread
  ~Core();                               // close()
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  const ClientOptions& options() const { return options_; }
  uint64_t next_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  // Hands a request to the I/O thread; `body` is its encoded message.
  void submit(uint64_t id, std::string body, Pending pending);
  void cancel(uint64_t id);
  Limits limits(std::chrono::milliseconds wait);
  void close();
  std::string endpoint() const;
  uint64_t failovers() const { return failovers_.load(); }

 private:
  struct Command {
    enum Kind { kSend, kCancel, kClose } kind = kSend;
    uint64_t id = 0;
    std::string body;
    Pending pending;
  };
  class Io;  // the I/O thread's state (core.cpp)

  void push(Command cmd);
  void run();
  void join();  // waits for the I/O thread (detaches it when called on it)

  const ClientOptions options_;
  std::atomic<uint64_t> next_id_{1};  // 0 is reserved by the protocol
  std::atomic<uint64_t> failovers_{0};
  int wake_fd_ = -1;                  // eventfd
  std::thread thread_;
  std::mutex join_mu_;  // serializes join()

  mutable std::mutex mu_;
  std::condition_variable limits_cv_;
  std::vector<Command> commands_;       // guarded by mu_
  bool closed_ = false;                 // guarded by mu_
  std::optional<Limits> limits_;        // guarded by mu_: the last heartbeat reply
  size_t endpoint_index_ = 0;           // guarded by mu_
};

}  // namespace tessera::client::detail
