// A real tessera-worker against a scripted scheduler endpoint (a ROUTER socket driven by the
// test): the registration handshake's order rules, made deterministic. The races these pin were
// found under load by the multi-scheduler and multi-host suites (docs/architecture.md "Several
// schedulers"):
// - only the ack of the worker's LATEST register attempt counts: an ack of an older attempt
//   (delayed by a link outage) belongs to a Batcher the scheduler has since replaced; taking it
//   started that Batcher's plans and made the new Batcher's first plan fail;
// - a worker that leaves a scheduler while that scheduler's plan still executes registers with
//   the next one only once the plan has finished: registered earlier, the new scheduler's first
//   plan found the compute thread busy and failed as "a step plan is already executing".
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/process.h"

namespace tessera::testing {
namespace {

using std::chrono::milliseconds;

// The scheduler side of one worker link: a ROUTER socket on a loopback port.
class ScriptedScheduler {
 public:
  ScriptedScheduler() : socket_(ctx_, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::maxmsgsize, int64_t{64} << 20);
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
  }
  const std::string& endpoint() const { return endpoint_; }

  // The next message from the worker, or nullopt at the deadline (a message that fails to
  // decode fails the test).
  std::optional<protocol::Message> next(milliseconds timeout) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) <= 0) return std::nullopt;
    auto frames = zmqu::recv(socket_, /*dontwait=*/true);
    if (!frames.ok() || frames->size() < 2) {
      ADD_FAILURE() << "unexpected frames from the worker";
      return std::nullopt;
    }
    identity_ = frames->front();
    auto msg = protocol::decode(frames->back());
    if (!msg.ok()) {
      ADD_FAILURE() << "undecodable message from the worker: " << msg.error().to_string();
      return std::nullopt;
    }
    return std::move(*msg);
  }
  void send(const protocol::Message& m) { ASSERT_TRUE(zmqu::send(socket_, {identity_, protocol::encode(m)}).ok()); }
  // Closes the socket: the worker's connection drops as when the scheduler process dies.
  void close() { socket_.close(); }

 private:
  zmq::context_t ctx_;
  zmq::socket_t socket_;
  std::string endpoint_;
  std::string identity_;
};

std::string describe(const std::optional<protocol::Message>& m) {
  return m ? std::string(protocol::message_type(*m)) : std::string("nothing");
}

TEST(WorkerRegisterTest, OnlyTheAckOfTheLatestRegisterAttemptCounts) {
  ScriptedScheduler sched;
  const std::string dir = make_temp_dir("tessera-register");
  Process worker(bin_path("tessera-worker"),
                 {"--model", shared_path("models/stories260K/stories260K.bin"), "--scheduler", sched.endpoint(), "--name",
                  "rw", "--backend", "cpu", "--threads", "1", "--num-pages", "64", "--insecure"},
                 dir + "/worker.log");
  // Attempts are one second apart while unanswered (worker_service.cpp).
  auto first = sched.next(milliseconds(20000));
  ASSERT_TRUE(first && std::holds_alternative<protocol::RegisterWorker>(*first)) << "got " << describe(first);
  const uint64_t id1 = std::get<protocol::RegisterWorker>(*first).id;
  auto second = sched.next(milliseconds(5000));
  ASSERT_TRUE(second && std::holds_alternative<protocol::RegisterWorker>(*second)) << "got " << describe(second);
  const uint64_t id2 = std::get<protocol::RegisterWorker>(*second).id;
  EXPECT_NE(id1, id2) << "each register attempt must carry its own id";

  // The delayed ack of the first attempt: ignored, so the worker keeps registering (a registered
  // worker would send a heartbeat at once).
  sched.send(protocol::RegisterAck{.id = id1, .accepted = true, .heartbeat_ms = 50, .instance = 7});
  auto third = sched.next(milliseconds(5000));
  ASSERT_TRUE(third && std::holds_alternative<protocol::RegisterWorker>(*third))
      << "after the ack of an older attempt the worker sent " << describe(third) << " instead of registering again";
  const uint64_t id3 = std::get<protocol::RegisterWorker>(*third).id;
  EXPECT_NE(id3, id1);
  EXPECT_NE(id3, id2);

  // The ack of the latest attempt registers it: heartbeats follow at the acked interval.
  sched.send(protocol::RegisterAck{.id = id3, .accepted = true, .heartbeat_ms = 50, .instance = 7});
  auto beat = sched.next(milliseconds(5000));
  ASSERT_TRUE(beat && std::holds_alternative<protocol::Heartbeat>(*beat)) << "got " << describe(beat);
  EXPECT_EQ(std::get<protocol::Heartbeat>(*beat).name, "rw");
  auto beat2 = sched.next(milliseconds(5000));
  EXPECT_TRUE(beat2 && std::holds_alternative<protocol::Heartbeat>(*beat2)) << "got " << describe(beat2);

  worker.signal(SIGTERM);
  EXPECT_GE(worker.wait_exit(milliseconds(10000)), 0);
  std::filesystem::remove_all(dir);
}

// A plan of `seqs` prefills of `len` tokens each on consecutive pages, each sampling greedily.
protocol::StepPlanMsg prefill_plan(uint64_t step, int seqs, int len, int page_size) {
  protocol::StepPlanMsg m{.id = step};
  m.plan.step_id = step;
  const int pages = (len + page_size - 1) / page_size;
  for (int s = 0; s < seqs; ++s) {
    SeqPlan sp{.request_id = static_cast<uint64_t>(1000 + s), .start_pos = 0, .sample = true};
    sp.sampling.temperature = 0.0f;
    for (int p = 0; p < pages; ++p) sp.block_table.push_back(s * pages + p);
    for (int t = 0; t < len; ++t) {
      sp.tokens.push_back(1 + (t * 7 + s) % 500);
      sp.slot_mapping.push_back(int64_t{sp.block_table[static_cast<size_t>(t / page_size)]} * page_size + t % page_size);
    }
    m.plan.seqs.push_back(std::move(sp));
  }
  return m;
}

TEST(WorkerRegisterTest, RegistersWithTheNextSchedulerOnlyOnceTheLeftOnesPlanHasFinished) {
  ScriptedScheduler s1, s2;
  const std::string dir = make_temp_dir("tessera-register");
  Process worker(bin_path("tessera-worker"),
                 {"--model", shared_path("models/stories260K/stories260K.bin"), "--scheduler",
                  s1.endpoint() + "," + s2.endpoint(), "--name", "rw", "--backend", "cpu", "--threads", "1", "--num-pages",
                  "512", "--max-batch-tokens", "8192", "--insecure", "--min-step-ms", "1000"},
                 dir + "/worker.log");
  // The worker orders its schedulers itself (by its name): `a` is the one it tries first.
  std::optional<protocol::Message> reg;
  ScriptedScheduler* first = nullptr;
  for (int i = 0; i < 200 && !first; ++i) {
    for (ScriptedScheduler* s : {&s1, &s2})
      if (!first && (reg = s->next(milliseconds(50)))) first = s;
  }
  ASSERT_NE(first, nullptr) << "no register from the worker";
  ScriptedScheduler& a = *first;
  ScriptedScheduler& b = first == &s1 ? s2 : s1;
  ASSERT_TRUE(reg && std::holds_alternative<protocol::RegisterWorker>(*reg)) << "got " << describe(reg);
  const auto info = std::get<protocol::RegisterWorker>(*reg);
  a.send(protocol::RegisterAck{.id = info.id, .accepted = true, .heartbeat_ms = 50, .instance = 1});
  // A plan long enough that the worker notices the drop and could reach b long before it
  // finishes: 8 prefills of 500 tokens, its result held until 1 s after the step began
  // (--min-step-ms 1000, docs/operations.md "Pacing": the prefills alone take ~60 ms on a
  // Zen 5 core, less than the three heartbeats below).
  const int len = 500, seqs = 8;
  ASSERT_GE(info.max_batch_tokens, seqs * len);
  ASSERT_GE(info.num_pages, seqs * ((len + info.page_size - 1) / info.page_size));
  a.send(prefill_plan(1, seqs, len, info.page_size));
  const auto sent = std::chrono::steady_clock::now();
  // Three heartbeats (the first at once, then 50 ms apart) after the plan was sent: the
  // worker's loop, which reads its socket between heartbeats, has taken the plan by then.
  for (int i = 0; i < 3; ++i) {
    auto beat = a.next(milliseconds(5000));
    ASSERT_TRUE(beat && std::holds_alternative<protocol::Heartbeat>(*beat)) << "got " << describe(beat);
  }
  a.close();

  auto reg_b = b.next(milliseconds(20000));
  ASSERT_TRUE(reg_b && std::holds_alternative<protocol::RegisterWorker>(*reg_b)) << "got " << describe(reg_b);
  const double waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent).count();
  b.send(protocol::RegisterAck{.id = std::get<protocol::RegisterWorker>(*reg_b).id, .accepted = true, .heartbeat_ms = 1000,
                               .instance = 2});
  b.send(prefill_plan(1, 1, 8, info.page_size));
  std::optional<protocol::Message> res;
  for (int i = 0; i < 20; ++i) {  // skip heartbeats
    res = b.next(milliseconds(20000));
    if (!res || !std::holds_alternative<protocol::Heartbeat>(*res)) break;
  }
  ASSERT_TRUE(res && std::holds_alternative<protocol::StepResultMsg>(*res)) << "got " << describe(res);
  const StepResult& r = std::get<protocol::StepResultMsg>(*res).result;
  EXPECT_EQ(r.error_code, ErrorCode::kOk) << "the new scheduler's first plan failed: " << r.error_message
                                          << " (registered " << waited_ms << " ms after the left scheduler's plan was sent)";
  EXPECT_EQ(r.results.size(), 1u);

  worker.signal(SIGTERM);
  EXPECT_GE(worker.wait_exit(milliseconds(10000)), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::testing
