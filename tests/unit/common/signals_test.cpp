// signals.h: SIGTERM/SIGINT reach the waiter thread, set the stop flag, wake wait_for_stop and
// run OnStop callbacks (also one registered after the signal); the process keeps running.
#include "tessera/common/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

#include <gtest/gtest.h>

#include "tessera/common/child_process.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;

TEST(Signals, SigtermStopsWithoutKillingAndRunsCallbacks) {
  signals::install();
  signals::install();  // idempotent
  EXPECT_FALSE(signals::stop_flag());
  EXPECT_FALSE(signals::wait_for_stop(10ms));
  std::atomic<int> seen{0};
  {
    signals::OnStop on_stop([&](int sig) { seen.store(sig); });
    ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
    EXPECT_TRUE(signals::wait_for_stop(5s));
  }
  EXPECT_TRUE(signals::stop_flag());
  EXPECT_EQ(signals::received_signal(), SIGTERM);
  EXPECT_EQ(seen.load(), SIGTERM);
  // Registered after the signal: runs at once.
  std::atomic<int> late{0};
  signals::OnStop after([&](int sig) { late.store(sig); });
  EXPECT_EQ(late.load(), SIGTERM);
}

TEST(Signals, ChildrenGetDefaultSignalsBack) {
  signals::install();  // SIGINT/SIGTERM blocked here; a child must not inherit that
  auto child = ChildProcess::spawn({.binary = "/bin/sh", .args = {"-c", "exec sleep 30"}});
  ASSERT_TRUE(child.ok());
  bool killed = true;
  const ExitStatus st = child->terminate(5s, &killed);
  EXPECT_FALSE(killed) << "SIGTERM was blocked in the child";
  EXPECT_EQ(st.term_signal(), SIGTERM);
}

}  // namespace
}  // namespace tessera
