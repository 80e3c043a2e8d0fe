// Message-size limits on every inter-process ZeroMQ socket (issue 18, finding 7): a peer that
// sends one frame far over protocol::kMaxMessageBytes is disconnected by libzmq before the
// frame is allocated (ZMQ_MAXMSGSIZE, zmqu::limit_message_size), so the receiving process's
// peak memory does not grow by the frame's size, and it keeps serving. The sender is an
// authenticated peer (CURVE keys of the role the port admits): the limit holds for peers that
// pass the handshake too.
#include <zmq.h>

#include <cstring>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "tessera/common/protocol.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/curve_keys.h"

namespace tessera::testing::cluster_test {
namespace {

// Peak resident memory (VmHWM) of a process, in MiB; -1 when unreadable.
double peak_rss_mib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (f >> key) {
    if (key == "VmHWM:") {
      double kib = 0;
      f >> kib;
      return kib / 1024.0;
    }
    f.ignore(1 << 16, '\n');
  }
  return -1;
}

// Connects a DEALER to `endpoint`, sends one frame of `bytes`, and waits (up to 20 s) for the
// peer to drop the connection. True when it did. `keys`: the CURVE client keys (empty = plain).
bool peer_drops_oversized_frame(const std::string& endpoint, size_t bytes, const curve::ClientKeys& keys) {
  zmq::context_t ctx(1);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  curve::make_client(dealer, keys);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::reconnect_ivl, 60000);  // one connection: its drop is the signal
  const std::string monitor_ep = "inproc://limits-monitor";
  if (zmq_socket_monitor(dealer.handle(), monitor_ep.c_str(), ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0) {
    return false;
  }
  zmq::socket_t events(ctx, zmq::socket_type::pair);
  events.connect(monitor_ep);
  dealer.connect(endpoint);
  // Each monitor event is two frames: [u16 event, u32 value][endpoint].
  auto next_event = [&](int timeout_ms) -> int {
    zmq::pollitem_t item{events.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) <= 0) return -1;
    zmq::message_t head, addr;
    if (!events.recv(head) || !events.recv(addr)) return -1;
    uint16_t ev = 0;
    std::memcpy(&ev, head.data(), sizeof ev);
    return ev;
  };
  if (next_event(10000) != ZMQ_EVENT_CONNECTED) return false;
  std::string frame(bytes, 'x');
  if (!dealer.send(zmq::buffer(frame), zmq::send_flags::none)) return false;
  for (int ev = next_event(20000); ev != -1; ev = next_event(20000)) {
    if (ev == ZMQ_EVENT_DISCONNECTED) return true;
  }
  return false;
}

TEST(ClusterLimits, OversizedFramesAreRefusedWithoutGrowingMemoryAndServingGoesOn) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok()) << cluster.logs();
  const size_t frame = 4 * protocol::kMaxMessageBytes;  // 256 MiB
  struct Target {
    const char* what;
    std::string endpoint;
    Process* process;
    curve::ClientKeys keys;
  };
  const Target targets[] = {
      {"scheduler, frontend port", cluster.scheduler_frontend_endpoint(), &cluster.scheduler(),
       client_keys(curve::Role::kFrontend, curve::Role::kScheduler)},
      {"scheduler, worker port", cluster.scheduler_worker_endpoint(), &cluster.scheduler(),
       client_keys(curve::Role::kWorker, curve::Role::kScheduler)},
      {"frontend, client API", cluster.zmq_endpoint(), &cluster.frontend(), {}},
  };
  for (const Target& t : targets) {
    const double before = peak_rss_mib(t.process->pid());
    ASSERT_GT(before, 0) << t.what;
    EXPECT_TRUE(peer_drops_oversized_frame(t.endpoint, frame, t.keys)) << t.what << ": the peer kept the connection";
    const double after = peak_rss_mib(t.process->pid());
    EXPECT_LT(after - before, 100.0) << t.what << ": peak RSS " << before << " -> " << after << " MiB";
  }
  auto ok = cluster.post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})");
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_EQ(ok->status, 200) << ok->body;
}

}  // namespace
}  // namespace tessera::testing::cluster_test
