// Requests orphaned by a worker, end to end:
// - a worker killed while requests wait or prefill on it: those that streamed nothing move to
//   the other worker (re-queued), those that streamed tokens continue there (migrated), and all
//   answer exactly their greedy reference; nothing hangs;
// - a worker that registers again (here: its scheduler restarted and reuses request ids) drops
//   every per-request engine state, so a seeded sampled request gives the same tokens as on a
//   fresh worker (requests sent straight to the scheduler, as a frontend would).
#include <signal.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/openai_client.h"
#include "tessera/testing/curve_keys.h"

namespace tessera::testing::cluster_test {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string greedy_body(const GreedyCase& c) {
  return json{{"prompt", c.prompt}, {"max_tokens", c.steps}, {"temperature", 0}, {"stream", true}, {"ignore_eos", true}}
      .dump();
}

// Two workers. Phase A: long greedy streams on both. Then w1 freezes (SIGSTOP) and phase B's
// requests arrive; those routed to w1 cannot get a token. Then w1 is killed (-9).
TEST(ClusterRequeue, DeadWorkersUnstreamedRequestsMoveToALiveWorker) {
  // Dead after 2 s of silence: the SIGKILL (not the freeze) is what the scheduler notices.
  Cluster cluster(ClusterOptions{.worker_dead_ms = 2000, .num_workers = 2});
  ASSERT_TRUE(cluster.ok());
  const std::vector<GreedyCase> cases = greedy_cases();
  std::vector<GreedyCase> long_cases;
  for (const auto& c : cases)
    if (c.steps >= 256) long_cases.push_back(c);
  ASSERT_GE(long_cases.size(), 2u);

  std::vector<std::unique_ptr<CompletionStream>> a, b;
  std::vector<std::thread> threads;
  for (const auto& c : long_cases) {
    a.push_back(std::make_unique<CompletionStream>());
    a.back()->body = greedy_body(c);
  }
  for (auto& s : a) threads.emplace_back([&, p = s.get()] { run_completion_stream(cluster.http_port(), *p); });
  ASSERT_TRUE(wait_until([&] {
    for (auto& s : a)
      if (s->chunks.load() < 1 && !s->ended.load()) return false;
    return true;
  }, milliseconds(15000))) << cluster.logs();

  cluster.worker(1).signal(SIGSTOP);
  const double w1_before = routed_to(cluster, "w1");
  for (const auto& c : cases) {
    b.push_back(std::make_unique<CompletionStream>());
    b.back()->body = greedy_body(c);
  }
  for (auto& s : b) threads.emplace_back([&, p = s.get()] { run_completion_stream(cluster.http_port(), *p); });
  // At least one of phase B's requests must be waiting on the frozen worker.
  ASSERT_TRUE(wait_until([&] { return routed_to(cluster, "w1") > w1_before; }, milliseconds(10000)))
      << "no request was routed to w1 while it was frozen; nothing to test\n" << cluster.logs();
  // Let every phase B request reach the scheduler (routed somewhere) before the kill.
  ASSERT_TRUE(wait_until([&] { return routed_to(cluster, "w0") + routed_to(cluster, "w1") >=
                                      static_cast<double>(a.size() + b.size()); },
                         milliseconds(10000)));
  const double w1_stuck = routed_to(cluster, "w1") - w1_before;
  cluster.worker(1).signal(SIGKILL);
  const auto killed = Clock::now();
  for (auto& t : threads) t.join();

  int correct_answers = 0;
  auto check = [&](const CompletionStream& s, const GreedyCase& c, bool may_fail) {
    SCOPED_TRACE(c.prompt + " / " + std::to_string(c.steps));
    EXPECT_EQ(s.status, 200);
    EXPECT_LT(std::chrono::duration<double>(s.end - killed).count(), 15.0) << "took too long to end after the kill";
    if (!s.error.empty()) {
      EXPECT_TRUE(may_fail) << "a request failed instead of moving (re-queue or migration): " << s.error;
      EXPECT_GE(s.chunks_before_error, 1) << "failed before streaming anything: " << s.error;
      EXPECT_NE(s.error.find("peer_dead"), std::string::npos) << s.error;
      return;
    }
    EXPECT_TRUE(s.done) << "no data: [DONE] and no error";
    EXPECT_EQ(s.text.substr(0, c.completion.size()), c.completion) << "not the greedy reference";
    ++correct_answers;
  };
  for (size_t i = 0; i < a.size(); ++i) check(*a[i], long_cases[i], /*may_fail=*/false);  // migrated
  for (size_t i = 0; i < b.size(); ++i) check(*b[i], cases[i], /*may_fail=*/false);
  // Every request w1 held without a token was moved (phase B's for sure).
  const double requeued = cluster.metric(cluster.metrics_port(), "tessera_scheduler_requeued_requests_total");
  EXPECT_GE(requeued, w1_stuck) << cluster.logs();
  EXPECT_EQ(correct_answers, static_cast<int>(a.size() + b.size()));
  EXPECT_TRUE(wait_until([&] { return cluster.metric(cluster.metrics_port(), "tessera_scheduler_pages", "state=\"held\"") == 0.0; },
                         milliseconds(5000)));
  EXPECT_TRUE(cluster.scheduler().alive());
  EXPECT_TRUE(cluster.worker(0).alive());
}

// Sends a request straight to the scheduler's frontend socket (as a frontend would) and
// collects its tokens until `want` tokens, its final/error, or the deadline.
std::vector<int32_t> scheduler_tokens(zmq::socket_t& sock, protocol::GenerateRequest req, size_t want) {
  std::vector<int32_t> out;
  EXPECT_TRUE(zmqu::send(sock, {protocol::encode(req)}).ok());
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (out.size() < want && Clock::now() < deadline) {
    zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(100));
    if (!(item.revents & ZMQ_POLLIN)) continue;
    auto frames = zmqu::recv(sock);
    if (!frames.ok() || frames->empty()) continue;
    auto msg = protocol::decode(frames->back());
    if (!msg.ok() || protocol::message_id(*msg) != req.id) continue;
    if (auto* t = std::get_if<protocol::TokenEvent>(&*msg)) out.insert(out.end(), t->tokens.begin(), t->tokens.end());
    if (auto* e = std::get_if<protocol::ErrorEvent>(&*msg)) {
      ADD_FAILURE() << "error " << error_code_name(e->code) << ": " << e->message;
      break;
    }
    if (std::holds_alternative<protocol::FinalEvent>(*msg)) break;
  }
  return out;
}

protocol::GenerateRequest seeded_request(uint64_t id, int32_t max_tokens) {
  protocol::GenerateRequest r;
  r.id = id;
  r.prompt_tokens = {1, 403, 407, 261, 378, 302};
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 4242;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

// The scheduler dies while a seeded sampled request runs on the worker (its sampler state stays
// there, never released); a new scheduler starts and numbers requests from 1 again. The worker
// registers with it and must have dropped that state: the same seeded request, given the same
// internal id, must produce the same tokens as the next one (a fresh id) and as the first run.
TEST(ClusterReRegister, WorkerDropsRequestStateWhenItRegistersAgain) {
  // Paced (kPacedStepMs): the 400-token request is certainly still running at the restart.
  Cluster cluster(ClusterOptions{.worker_dead_ms = 1000,
                                 .worker_args = {"--scheduler-dead-ms", "600"},
                                 .worker_min_step_ms = kPacedStepMs});
  ASSERT_TRUE(cluster.ok());
  zmq::context_t ctx(1);
  std::vector<int32_t> first;
  {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    secure_client(s, curve::Role::kFrontend, curve::Role::kScheduler);
    s.connect(cluster.scheduler_frontend_endpoint());
    first = scheduler_tokens(s, seeded_request(1, 400), 8);  // scheduler-internal id 1; still running
    ASSERT_EQ(first.size(), 8u) << cluster.logs();
    ASSERT_TRUE(cluster.restart_scheduler()) << cluster.logs();
  }
  ASSERT_TRUE(wait_until([&] { return cluster.metric(cluster.metrics_port(), "tessera_scheduler_live_workers") == 1.0; },
                         milliseconds(10000)))
      << "the worker did not register with the new scheduler\n" << cluster.logs();
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  secure_client(s, curve::Role::kFrontend, curve::Role::kScheduler);
  s.connect(cluster.scheduler_frontend_endpoint());
  const std::vector<int32_t> again = scheduler_tokens(s, seeded_request(1, 16), 16);  // internal id 1 again
  const std::vector<int32_t> fresh = scheduler_tokens(s, seeded_request(2, 16), 16);  // internal id 2
  ASSERT_EQ(again.size(), 16u);
  ASSERT_EQ(fresh.size(), 16u);
  EXPECT_EQ(again, fresh) << "the reused request id met stale sampler state on the worker";
  EXPECT_EQ(std::vector<int32_t>(again.begin(), again.begin() + 8), first) << "not the seeded sequence of the first run";
}

}  // namespace
}  // namespace tessera::testing::cluster_test
