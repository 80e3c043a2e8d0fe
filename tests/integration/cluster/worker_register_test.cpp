// A real tessera-worker against a scripted scheduler endpoint (a ROUTER socket driven by the
// test): the registration handshake's order rules, made deterministic. The races these pin were
// found under load by the multi-scheduler and multi-host suites (docs/architecture.md "Several
// schedulers"):
// - only the ack of the worker's LATEST register attempt counts: an ack of an older attempt
//   (delayed by a link outage) belongs to a Batcher the scheduler has since replaced; taking it
//   started that Batcher's plans and made the new Batcher's first plan fail.
#include <signal.h>

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

}  // namespace
}  // namespace tessera::testing
