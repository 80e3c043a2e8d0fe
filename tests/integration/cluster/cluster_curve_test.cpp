// CURVE on the internal sockets (issue 18 finding 1; docs/security.md): against real processes
// secured with the test key set, peers without an admitted key — a plain ZeroMQ socket, or a
// CURVE client whose key is not in the allow-list — are refused at the handshake: an intruder
// worker never registers (so the scheduler sends it no prompt), an intruder cannot read,
// overwrite or delete a preference on the kvstore port, nor apply `invalidate_user` on the
// scheduler's frontend port; the refused-peer counters go up; admitted peers are served. (The
// kvstore's part is tests/integration/kvstore/service_curve_test.cpp.)
#include <zmq.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "tessera/common/curve.h"
#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/paths.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Keys of an outsider: its own key pair, and the server public keys (which are not secret).
curve::ClientKeys intruder_keys(curve::Role server) {
  curve::ClientKeys k = client_keys(curve::Role::kFrontend, server);
  k.own = curve::generate_pair().value();
  return k;
}

// A DEALER that watches its own handshake (socket monitor): handshake() says whether the
// server accepted it (+1), refused it (-1) or neither happened before the deadline (0).
class Peer {
 public:
  Peer(const std::string& endpoint, const curve::ClientKeys& keys, const std::string& routing_id = "")
      : sock_(ctx_, zmq::socket_type::dealer), events_(ctx_, zmq::socket_type::pair) {
    sock_.set(zmq::sockopt::linger, 0);
    if (!routing_id.empty()) sock_.set(zmq::sockopt::routing_id, routing_id);
    curve::make_client(sock_, keys);
    const std::string monitor = "inproc://peer-monitor";
    EXPECT_EQ(zmq_socket_monitor(sock_.handle(), monitor.c_str(),
                                 ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL),
              0);
    events_.connect(monitor);
    sock_.connect(endpoint);
  }
  int handshake(std::chrono::milliseconds timeout) {
    zmq::pollitem_t item{events_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) <= 0) return 0;
    zmq::message_t head, addr;
    if (!events_.recv(head) || !events_.recv(addr)) return 0;
    uint16_t ev = 0;
    std::memcpy(&ev, head.data(), sizeof ev);
    return ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED ? 1 : -1;
  }
  void send(const protocol::Message& m) { ASSERT_TRUE(zmqu::send(sock_, {protocol::encode(m)}, true).ok()); }
  // Any message within `timeout`?
  bool receives(std::chrono::milliseconds timeout) {
    zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
    return zmq::poll(&item, 1, timeout) > 0;
  }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t sock_;
  zmq::socket_t events_;
};

class ClusterCurve : public SharedClusterTest {};

// A real tessera-worker with a key set of its own (the cluster's public scheduler key, but its
// own worker key) and a plain ZeroMQ "worker" sending a well-formed register: neither
// registers, so the scheduler routes nothing to them; the real worker serves everything.
TEST_F(ClusterCurve, IntruderWorkersCannotRegisterAndGetNoPrompt) {
  Cluster& c = *cluster_;
  const double refused_before = c.metric(c.metrics_port(), "tessera_scheduler_refused_peers_total", "workers");
  ASSERT_EQ(refused_before, refused_before) << "no tessera_scheduler_refused_peers_total{socket=\"workers\"}";

  const std::string dir = make_temp_dir("tessera-intruder");
  ASSERT_TRUE(curve::generate_key_set(dir).ok());
  fs::copy_file(curve_dir() + "/scheduler.key", dir + "/scheduler.key", fs::copy_options::overwrite_existing);
  Process intruder(bin_path("tessera-worker"),
                   {"--model", shared_path("models/stories260K/stories260K.bin"), "--scheduler",
                    c.scheduler_worker_endpoint(), "--threads", "1", "--num-pages", "64", "--name", "intruder",
                    "--backend", "cpu", "--curve-dir", dir},
                   dir + "/intruder.log");
  ASSERT_FALSE(intruder.wait_line("READY", milliseconds(20000)).empty()) << read_file(dir + "/intruder.log");
  Peer plain(c.scheduler_worker_endpoint(), {}, "plain-intruder");
  plain.send(protocol::RegisterWorker{.id = 1, .worker_name = "plain-intruder", .num_pages = 64, .page_size = 16,
                                      .max_batch_tokens = 256, .max_seq_len = 256, .vocab_size = 512});
  EXPECT_EQ(plain.handshake(milliseconds(10000)), -1) << "a plain ZeroMQ peer passed the handshake";

  // Both handshakes are refused and counted (libzmq does not retry a refused one).
  ASSERT_TRUE(wait_until(
      [&] { return c.metric(c.metrics_port(), "tessera_scheduler_refused_peers_total", "workers") >= refused_before + 2; },
      milliseconds(15000)))
      << c.logs();
  EXPECT_NE(read_file(c.scheduler().log_path()).find("refused a peer on workers"), std::string::npos) << c.logs();
  for (int i = 0; i < 6; ++i) {
    auto r = c.post("/v1/completions", R"({"prompt": "Once upon a time number )" + std::to_string(i) +
                                           R"(", "max_tokens": 4, "temperature": 0})");
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_EQ(r->status, 200) << r->body;
  }
  EXPECT_EQ(c.metric(c.metrics_port(), "tessera_scheduler_live_workers"), 1.0);
  const double to_intruder = c.metric(c.metrics_port(), "tessera_scheduler_routed_requests_total", "intruder");
  EXPECT_TRUE(std::isnan(to_intruder) || to_intruder == 0.0) << to_intruder << " requests routed to the intruder";
  EXPECT_FALSE(plain.receives(milliseconds(10))) << "the scheduler answered a refused peer";
  EXPECT_TRUE(intruder.alive());
}

// `invalidate_user` from a plain peer and from an unknown key is never applied; from the
// frontend key it is (the scheduler logs each applied one with the user's new epoch).
TEST_F(ClusterCurve, UnauthenticatedInvalidateUserIsRefused) {
  Cluster& c = *cluster_;
  const std::string user = "victim-" + std::to_string(::getpid());
  Peer plain(c.scheduler_frontend_endpoint(), {});
  plain.send(protocol::InvalidateUser{.id = 1, .user = user});
  EXPECT_EQ(plain.handshake(milliseconds(10000)), -1);
  Peer stranger(c.scheduler_frontend_endpoint(), intruder_keys(curve::Role::kScheduler));
  stranger.send(protocol::InvalidateUser{.id = 2, .user = user});
  EXPECT_EQ(stranger.handshake(milliseconds(10000)), -1);
  EXPECT_TRUE(wait_until(
      [&] { return c.metric(c.metrics_port(), "tessera_scheduler_refused_peers_total", "frontends") >= 2.0; },
      milliseconds(10000)))
      << "the plain and the unknown-key peer were not both counted";

  Peer admitted(c.scheduler_frontend_endpoint(), client_keys(curve::Role::kFrontend, curve::Role::kScheduler));
  EXPECT_EQ(admitted.handshake(milliseconds(10000)), 1);
  admitted.send(protocol::InvalidateUser{.id = 3, .user = user});
  const std::string applied = "user=" + user + " | preference K/V invalidated (epoch ";
  ASSERT_TRUE(wait_until([&] { return read_file(c.scheduler().log_path()).find(applied) != std::string::npos; },
                         milliseconds(10000)))
      << c.logs();
  const std::string log = read_file(c.scheduler().log_path());
  EXPECT_NE(log.find(applied + "1)"), std::string::npos) << log;
  EXPECT_EQ(log.find(applied + "2)"), std::string::npos) << "an unauthenticated invalidate_user was applied\n" << log;
}

// --zmq-curve: the frontend's client API admits only client keys; an admitted client is served.
TEST(ClientApiCurve, OnlyAdmittedClientKeysReachTheClientApi) {
  Cluster c(ClusterOptions{.frontend_args = {"--zmq-curve", "true"}});
  ASSERT_TRUE(c.ok()) << c.logs();
  Peer plain(c.zmq_endpoint(), {});
  EXPECT_EQ(plain.handshake(milliseconds(10000)), -1);
  curve::ClientKeys stranger = client_keys(curve::Role::kClient, curve::Role::kFrontend);
  stranger.own = curve::generate_pair().value();
  Peer unknown(c.zmq_endpoint(), stranger);
  EXPECT_EQ(unknown.handshake(milliseconds(10000)), -1);
  EXPECT_TRUE(wait_until([&] { return c.metric(c.http_port(), "tessera_frontend_refused_peers_total") >= 2.0; },
                         milliseconds(10000)));

  Peer client(c.zmq_endpoint(), client_keys(curve::Role::kClient, curve::Role::kFrontend));
  ASSERT_EQ(client.handshake(milliseconds(10000)), 1);
  protocol::GenerateRequest req;
  req.id = 1;
  req.prompt = "Once upon a time";
  req.max_tokens = 4;
  client.send(req);
  EXPECT_TRUE(client.receives(milliseconds(20000))) << "no answer to an admitted client\n" << c.logs();
}

// A process started with neither --curve-dir nor --insecure refuses to start, naming both.
TEST(CurveOptions, ServicesRefuseToStartWithoutKeysOrInsecure) {
  for (const char* bin : {"tessera-scheduler", "tessera-kvstore"}) {
    auto r = run_to_exit({.binary = bin_path(bin), .args = {"--metrics-port", "-1"}, .stdout_to = ChildOutput::pipe(),
                          .stderr_to = ChildOutput::same_as_stdout()});
    if (std::string(bin) == "tessera-kvstore")
      r = run_to_exit({.binary = bin_path(bin), .args = {"--listen", "tcp://127.0.0.1:*"},
                       .stdout_to = ChildOutput::pipe(), .stderr_to = ChildOutput::same_as_stdout()});
    ASSERT_TRUE(r.ok());
    EXPECT_NE(r->first.code(), 0) << bin;
    EXPECT_NE(r->second.find("--curve-dir"), std::string::npos) << r->second;
    EXPECT_NE(r->second.find("--insecure"), std::string::npos) << r->second;
  }
}

}  // namespace
}  // namespace tessera::testing
