#include "tessera/common/signals.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::signals {
namespace {

struct State {
  std::atomic<bool> stop{false};
  std::atomic<int> last{0};
  std::mutex mu;  // guards fns and started; held while the callbacks run
  std::condition_variable cv;
  std::vector<const std::function<void(int)>*> fns;  // the live OnStop callbacks
  bool started = false;
};

// Never destroyed: the detached waiter thread may still use it while the process exits.
State& state() {
  static State* s = new State();
  return *s;
}

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void wait_loop() {
  const sigset_t set = stop_set();
  State& s = state();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    std::lock_guard<std::mutex> lock(s.mu);
    s.last.store(sig);
    s.stop.store(true);
    s.cv.notify_all();
    for (const auto* f : s.fns) (*f)(sig);
  }
}

}  // namespace

void install() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.started) return;
  s.started = true;
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::thread(wait_loop).detach();
}

std::atomic<bool>& stop_flag() { return state().stop; }

int received_signal() { return state().last.load(); }

bool wait_for_stop(std::chrono::milliseconds timeout) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  return s.cv.wait_for(lock, timeout, [&] { return s.stop.load(); });
}

OnStop::OnStop(std::function<void(int)> callback) : callback_(std::move(callback)) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.fns.push_back(&callback_);
  if (s.stop.load()) callback_(s.last.load());  // a signal that came before registration
}

OnStop::~OnStop() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.fns.erase(std::remove(s.fns.begin(), s.fns.end(), &callback_), s.fns.end());
}

}  // namespace tessera::signals
