// ChildProcess (common/child_process.h): arguments, environment, where output goes, exit
// statuses, bounded waits and SIGTERM-then-SIGKILL — on /bin/sh, so no binary of ours is needed.
#include "tessera/common/child_process.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tessera/testing/paths.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;

SpawnOptions sh(const std::string& script) {
  return {.binary = "/bin/sh", .args = {"-c", script}, .stdout_to = ChildOutput::pipe()};
}

TEST(ChildProcess, ReadsALineAndTheExitCode) {
  auto child = ChildProcess::spawn(sh("echo starting; echo 'LISTENING port=7'; exit 3"));
  ASSERT_TRUE(child.ok()) << child.error().to_string();
  EXPECT_GT(child->pid(), 0);
  EXPECT_EQ(child->read_line("LISTENING", 5s), "LISTENING port=7");
  const ExitStatus st = child->wait();
  EXPECT_TRUE(st.exited());
  EXPECT_EQ(st.code(), 3);
  EXPECT_EQ(st.shell_code(), 3);
  EXPECT_EQ(st.describe(), "exit status 3");
  EXPECT_FALSE(child->running());
  EXPECT_FALSE(child->signal(SIGTERM)) << "no signal to a reaped child";
}

TEST(ChildProcess, PassesArgumentsAndEnvironmentAndMergesStderr) {
  SpawnOptions o = sh("echo \"$0|$1|$TESSERA_TEST_VAR\"; echo oops >&2");
  o.args.push_back("first arg");
  o.args.push_back("second");
  o.env = {{"TESSERA_TEST_VAR", "v=1"}};
  o.stderr_to = ChildOutput::same_as_stdout();
  auto r = run_to_exit(o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->first.code(), 0);
  EXPECT_EQ(r->second, "first arg|second|v=1\noops\n");
}

TEST(ChildProcess, WritesToAFileTruncatingOrAppending) {
  const std::string path = testing::make_temp_dir("tessera-child") + "/out.log";
  for (bool append : {false, true}) {
    auto r = run_to_exit({.binary = "/bin/sh", .args = {"-c", "echo line"}, .stdout_to = ChildOutput::file(path, append)});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->second, "") << "nothing on a pipe";
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "line\nline\n");
}

TEST(ChildProcess, WaitForTimesOutThenTerminateStopsIt) {
  auto child = ChildProcess::spawn(sh("exec sleep 30"));
  ASSERT_TRUE(child.ok());
  EXPECT_TRUE(child->running());
  EXPECT_FALSE(child->wait_for(50ms).has_value());
  bool killed = true;
  const ExitStatus st = child->terminate(5s, &killed);
  EXPECT_FALSE(killed);
  EXPECT_TRUE(st.signaled());
  EXPECT_EQ(st.term_signal(), SIGTERM);
  EXPECT_EQ(st.shell_code(), 128 + SIGTERM);
}

TEST(ChildProcess, TerminateFallsBackToSigkill) {
  auto child = ChildProcess::spawn(sh("trap '' TERM; echo ready; while :; do sleep 1; done"));
  ASSERT_TRUE(child.ok());
  ASSERT_EQ(child->read_line("ready", 5s), "ready");  // the trap is in place
  bool killed = false;
  const ExitStatus st = child->terminate(200ms, &killed);
  EXPECT_TRUE(killed);
  EXPECT_EQ(st.term_signal(), SIGKILL);
}

TEST(ChildProcess, ReadLineStopsAtEofAndDeadline) {
  auto quiet = ChildProcess::spawn(sh("exec sleep 30"));
  ASSERT_TRUE(quiet.ok());
  EXPECT_EQ(quiet->read_line("X", 50ms), "");
  auto done = ChildProcess::spawn(sh("echo other"));
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->read_line("X", 5s), "") << "EOF before a matching line";
}

TEST(ChildProcess, AMissingBinaryIsAnError) {
  auto child = ChildProcess::spawn({.binary = "/nonexistent/tessera-nothing"});
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(child.error().message.find("/nonexistent/tessera-nothing"), std::string::npos);
}

TEST(ChildProcess, DestructorKillsAndReapsAndMovesTransferOwnership) {
  pid_t pid = -1;
  {
    auto child = ChildProcess::spawn(sh("exec sleep 30"));
    ASSERT_TRUE(child.ok());
    ChildProcess moved = std::move(child).value();
    pid = moved.pid();
    EXPECT_TRUE(moved.running());
  }
  EXPECT_NE(::kill(pid, 0), 0) << "the child was reaped (no zombie left)";
}

TEST(ChildProcess, NewProcessGroup) {
  auto child = ChildProcess::spawn({.binary = "/bin/sh", .args = {"-c", "exec sleep 30"}, .new_process_group = true});
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(::getpgid(child->pid()), child->pid());
}

}  // namespace
}  // namespace tessera
