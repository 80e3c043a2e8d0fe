// Multi-host tests over real networks: the three-host cluster of docs/deploy.md on network
// namespaces (three_hosts.h), driven over HTTP from a client host; faults injected for real — a
// host's link pulled and plugged back, processes killed and frozen, packet delay and loss.
#include <signal.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "multihost_helpers.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/status.h"
#include "tessera/testing/wait.h"

namespace tessera::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Every frontend serves exact greedy answers; both schedulers and all four workers are used.
TEST_F(MultiHost, ServesExactAnswersThroughBothFrontendsFromTheClientHost) {
  expect_greedy_answers(c(), 8);
  // Distinct prompts spread over both schedulers (ring of the frontends) and their workers.
  std::vector<std::thread> threads;
  std::vector<int> status(16, 0);
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      auto r = c().post(i % 2 ? kHostB : kHostA, "/v1/completions",
                        completion_json("Story number " + std::to_string(i) + " begins", 16));
      status[i] = r.ok() ? r->status : -1;
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(status[i], 200) << "request " << i;
  double routed = 0;
  for (const auto& ip : {kHostA, kHostB}) {
    const double n = c().metric(ip, kSchedulerMetricsPort, "tessera_scheduler_routed_requests_total");
    EXPECT_GT(n, 0) << "scheduler on " << ip << " got no request";
    routed += n;
  }
  EXPECT_GE(routed, 24.0);
}

// The two kvstores share their L2 (Redis on host-c): a preference stored through host-a's
// frontend (kvstore-a) is read back through host-b's (kvstore-b); deleted through kvstore-b, it
// is gone there.
TEST_F(MultiHost, StoredPreferenceIsSharedByBothKvstores) {
  const std::vector<std::pair<std::string, std::string>> auth = {{"Authorization", std::string("Bearer ") + kAdminToken}};
  const std::string path = "/admin/v1/users/walkthrough-user/preference";
  auto put = c().request({.host = kHostA, .port = kHttpPort, .method = "PUT", .path = path,
                          .body = R"({"preference": "Likes stories about a red ball.", "alpha": 0.5})", .headers = auth});
  ASSERT_TRUE(put.ok()) << put.error().to_string();
  ASSERT_EQ(put->status, 200) << put->body;
  auto got = c().request({.host = kHostB, .port = kHttpPort, .method = "GET", .path = path, .headers = auth});
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got->status, 200) << got->body;
  EXPECT_NE(got->body.find("Likes stories about a red ball."), std::string::npos) << got->body;
  auto del = c().request({.host = kHostB, .port = kHttpPort, .method = "DELETE", .path = path, .headers = auth});
  ASSERT_TRUE(del.ok()) << del.error().to_string();
  EXPECT_EQ(del->status, 200) << del->body;
  auto gone = c().request({.host = kHostB, .port = kHttpPort, .method = "GET", .path = path, .headers = auth});
  ASSERT_TRUE(gone.ok()) << gone.error().to_string();
  EXPECT_EQ(gone->status, 404) << gone->body;
  // Not yet: the deletion reaching kvstore-a's L1 (issue 14 item 3, "invalidation reaches every
  // node") — a GET through host-a still finds the preference in kvstore-a's L1 until its TTL or
  // LRU eviction. Once fixed, assert the same 404 through kHostA here.
}

// host-c (workers w3 and w4) loses its link with streams in flight: every stream ends with its
// answer or a clear error (peer_dead), requests sent meanwhile are answered by the workers
// left (re-queued, exact), and when the link comes back both workers register again (with
// either scheduler: cut off from both, each tried its list in turn; repair() sends them home).
TEST_F(MultiHost, WorkerHostLinkDownAndUp) {
  constexpr int kStreams = 8;
  std::vector<Stream> streams(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i)
    threads.emplace_back([&, i] {
      run_stream(c(), i % 2 ? kHostB : kHostA, "Once upon a time, in stream " + std::to_string(i), 300, streams[i]);
    });
  ASSERT_TRUE(wait_until([&] {
    for (auto& s : streams)
      if (s.chunks.load() < 1 && !s.ended.load()) return false;
    return true;
  }, milliseconds(10000)));
  ASSERT_OK(c().host("c").link_down());
  const auto down = Clock::now();
  // Sent while host-c is unreachable but not yet declared dead: re-queued, then answered.
  expect_greedy_answers(c(), 6);
  for (auto& t : threads) t.join();
  int answered = 0, failed = 0;
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE("stream " + std::to_string(i));
    if (streams[i].done && streams[i].error.empty()) {
      ++answered;
      EXPECT_GE(streams[i].chunks.load(), 1);
    } else {
      ++failed;
      EXPECT_TRUE(is_clear_error(streams[i].error)) << "ended without its answer nor a clear error: status "
                                                     << streams[i].status << " " << streams[i].error;
    }
  }
  EXPECT_EQ(answered + failed, kStreams);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - down).count(), 15.0);
  // Both schedulers lost their host-c worker.
  EXPECT_TRUE(wait_until([&] { return c().live_workers("a") == 1.0 && c().live_workers("b") == 1.0; }, milliseconds(5000)));
  ASSERT_OK(c().host("c").link_up());
  EXPECT_TRUE(wait_until([&] { return c().live_workers("a") + c().live_workers("b") == 4.0; }, milliseconds(10000)))
      << "w3/w4 did not register again after the link came back\n" << c().logs();
  expect_greedy_answers(c(), 4);
}

// A worker frozen (SIGSTOP) is declared dead and comes back when continued; a worker killed
// comes back when restarted; a scheduler killed: its frontends' requests go to the other one,
// and so do its workers (at once: their connection drops).
TEST_F(MultiHost, ProcessesFrozenAndKilled) {
  c().process("w1").signal(SIGSTOP);
  EXPECT_TRUE(wait_until([&] { return c().live_workers("a") == 1.0; }, milliseconds(5000)));
  expect_greedy_answers(c(), 4);
  c().process("w1").signal(SIGCONT);
  // Back with sched-a, or with sched-b when its own silence ran past --scheduler-dead-ms first.
  EXPECT_TRUE(wait_until([&] { return c().live_workers("a") + c().live_workers("b") == 4.0; }, milliseconds(5000)))
      << c().logs();
  c().repair();  // w1 home again, if it moved
  ASSERT_TRUE(c().settled(milliseconds(10000))) << c().logs();

  c().kill("w4");
  EXPECT_TRUE(wait_until([&] { return c().live_workers("b") == 1.0; }, milliseconds(5000)));
  ASSERT_TRUE(c().start("w4")) << c().logs();
  EXPECT_TRUE(wait_until([&] { return c().live_workers("b") == 2.0; }, milliseconds(10000))) << c().logs();

  c().kill("sched-b");
  const auto killed = Clock::now();
  // w2 and w4 register with sched-a within the bound (--scheduler-dead-ms + 1 s; at once here).
  EXPECT_TRUE(wait_until([&] { return c().live_workers("a") == 4.0; }, scaled(milliseconds(2000)), milliseconds(5)))
      << "sched-b's workers did not register with sched-a\n" << c().logs();
  std::printf("sched-b killed: its workers registered with sched-a after %.0f ms\n",
              std::chrono::duration<double, std::milli>(Clock::now() - killed).count());
  std::vector<std::thread> threads;
  std::vector<int> status(6, 0);
  for (int i = 0; i < 6; ++i)
    threads.emplace_back([&, i] {
      auto r = c().post(kHostB, "/v1/completions", completion_json("Without sched-b " + std::to_string(i), 16));
      status[i] = r.ok() ? r->status : -1;
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(status[i], 200) << "request " << i << "\n" << c().logs();
  ASSERT_TRUE(c().start("sched-b")) << c().logs();
  c().repair();  // w2 and w4 stay with sched-a until restarted
  EXPECT_TRUE(c().settled(milliseconds(10000))) << c().logs();
}

// Packet delay and loss on host-c's link (tc netem): the cluster keeps serving exact answers,
// the workers stay live, and the delay is measured on the wire.
TEST_F(MultiHost, PacketDelayAndLoss) {
  const Status st = c().host("c").netem("delay 20ms loss 5%");
  if (!st.ok() && st.error().code == ErrorCode::kUnsupported) GTEST_SKIP() << "SKIPPED: " << st.error().message;
  ASSERT_OK(st);
  // A connection to w3's /metrics takes at least two delayed packets from host-c (SYN-ACK and
  // the answer).
  const auto t0 = Clock::now();
  auto r = c().get(kHostC, 8110, "/metrics", 5000);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_GE(ms, 40.0);
  expect_greedy_answers(c(), 8);
  EXPECT_EQ(c().live_workers("a"), 2.0);
  EXPECT_EQ(c().live_workers("b"), 2.0);
  ASSERT_OK(c().host("c").clear_netem());
}

}  // namespace
}  // namespace tessera::testing
