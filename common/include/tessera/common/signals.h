// The one signal-handling style of Tessera's binaries (tessera-frontend, -scheduler, -worker,
// -kvstore, `tessera up`): SIGINT and SIGTERM are blocked in every thread and received by one
// waiter thread (sigwait). What runs on a signal is therefore ordinary code — it may lock, log
// and call stop() — never an async-signal handler. SIGPIPE is ignored (a peer that goes away is
// an error on its socket, not a process kill).
//
//   int main(...) {
//     parse options ...
//     signals::install();                         // before any thread starts
//     auto server = Server::create(...);
//     signals::OnStop on_stop([&](int) { server->stop(); });
//     server->run();                              // or: loop until signals::stop_flag()
//
// Ownership and threading: process-wide state (the mask and dispositions are per process).
// install() must be called from main BEFORE any other thread is started: threads inherit the
// mask of the thread that creates them, and one started earlier would still take SIGINT/SIGTERM
// with the default action (exit). stop_flag(), received_signal() and wait_for_stop() are safe
// from any thread. Children started with ChildProcess get an empty mask and default
// SIGINT/SIGTERM back.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>

namespace tessera::signals {

// Blocks SIGINT/SIGTERM in the calling thread, ignores SIGPIPE and starts the waiter thread.
// Idempotent. On each signal the waiter sets stop_flag(), wakes wait_for_stop() and runs the
// registered OnStop callbacks.
void install();

// True once SIGINT or SIGTERM was received (for loops that poll; never reset).
std::atomic<bool>& stop_flag();
// The last signal received, 0 when none.
int received_signal();
// Waits up to `timeout`; returns early, true, once a stop was requested.
bool wait_for_stop(std::chrono::milliseconds timeout);

// Runs `callback(signal)` on the waiter thread for each SIGINT/SIGTERM received while this
// object lives; when one was received before, it runs once at construction (on the calling
// thread). The destructor waits for a running call, so what the callback uses may be destroyed
// right after the OnStop. A callback must not create or destroy an OnStop.
class OnStop {
 public:
  explicit OnStop(std::function<void(int)> callback);
  ~OnStop();
  OnStop(const OnStop&) = delete;
  OnStop& operator=(const OnStop&) = delete;

 private:
  std::function<void(int)> callback_;
};

}  // namespace tessera::signals
