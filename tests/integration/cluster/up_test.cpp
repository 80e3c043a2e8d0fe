// `tessera up` end to end: with no --model it synthesizes a random-weight model, labels it so in
// /v1/models, answers a completion, and stops every child on SIGTERM; with --workers 2 both
// workers register and get traffic.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/common/metrics.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/paths.h"

namespace tessera::testing::cluster_test {
namespace {

bool port_free(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;  // TIME_WAIT leftovers of earlier connections do not count as "in use"
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// A base port with base .. base+5 free (tessera up needs http, zmq, scheduler x3, kvstore).
int free_port_block() {
  std::mt19937 rng(static_cast<unsigned>(::getpid()));
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int base = 20000 + static_cast<int>(rng() % 30000);
    bool ok = true;
    for (int p = base; p < base + 6 && ok; ++p) ok = port_free(p);
    if (ok) return base;
  }
  return -1;
}

TEST(TesseraUp, SynthesizedModelServesAndStopsCleanly) {
  const int base = free_port_block();
  ASSERT_GT(base, 0);
  const std::string dir = testing::make_temp_dir("tessera-up");
  Process up(testing::bin_path("tessera"),
           {"up", "--http-port", std::to_string(base), "--zmq-port", std::to_string(base + 1), "--scheduler-port",
            std::to_string(base + 2), "--kvstore-port", std::to_string(base + 5), "--data-dir", dir, "--worker-threads", "1",
            "--num-pages", "256", "--restart", "never"},
           dir + "/up.log");
  const std::string ready = up.wait_line("tessera up: cluster ready", milliseconds(60000));
  ASSERT_FALSE(ready.empty()) << "tessera up never became ready";

  auto models = http::request({.port = base, .method = "GET", .path = "/v1/models", .timeout_ms = 5000});
  ASSERT_TRUE(models.ok()) << models.error().to_string();
  EXPECT_NE(models->body.find("random-weights"), std::string::npos) << models->body;
  auto r = http::request({.port = base, .method = "POST", .path = "/v1/completions",
                                .body = R"({"prompt": "Once upon a time", "max_tokens": 8})", .timeout_ms = 20000});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->status, 200) << r->body;
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["usage"]["completion_tokens"].get<int>(), 8) << r->body;

  up.signal(SIGTERM);
  EXPECT_EQ(up.wait_exit(milliseconds(30000)), 0);
  // Every child is gone: nothing listens on the HTTP or scheduler ports any more.
  EXPECT_TRUE(wait_until([&] { return port_free(base) && port_free(base + 2) && port_free(base + 3); }, milliseconds(5000)));
}

// --workers 2: both workers register before "ready", and concurrent requests reach both.
TEST(TesseraUp, TwoWorkersBothGetTraffic) {
  const int base = free_port_block();
  ASSERT_GT(base, 0);
  const std::string dir = testing::make_temp_dir("tessera-up");
  Process up(testing::bin_path("tessera"),
           {"up", "--workers", "2", "--http-port", std::to_string(base), "--zmq-port", std::to_string(base + 1),
            "--scheduler-port", std::to_string(base + 2), "--kvstore-port", std::to_string(base + 5), "--data-dir", dir,
            "--worker-threads", "1", "--num-pages", "256", "--restart", "never"},
           dir + "/up.log");
  const std::string ready = up.wait_line("tessera up: cluster ready", milliseconds(60000));
  ASSERT_FALSE(ready.empty()) << "tessera up never became ready";
  const int metrics_port = base + 4;  // scheduler-port + 2
  auto scheduler_metric = [&](const std::string& name, const std::string& filter) {
    auto r = http::request({.port = metrics_port, .method = "GET", .path = "/metrics", .timeout_ms = 5000});
    if (!r.ok() || r->status != 200) return -1.0;
    auto samples = metrics::parse_text(r->body);
    if (!samples.ok()) return -1.0;
    double sum = 0.0;
    for (const auto& smp : *samples)
      if (smp.name == name && smp.labels.find(filter) != std::string::npos) sum += smp.value;
    return sum;
  };
  EXPECT_EQ(scheduler_metric("tessera_scheduler_live_workers", ""), 2.0) << "ready before both workers registered";

  constexpr int kRequests = 8;
  std::vector<int> status(kRequests, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i)
    threads.emplace_back([&, i] {
      auto r = http::request(
          {.port = base, .method = "POST", .path = "/v1/completions",
           .body = nlohmann::json{{"prompt", "Request " + std::to_string(i) + " of many"}, {"max_tokens", 32},
                                  {"ignore_eos", true}}.dump(),
           .timeout_ms = 30000});
      status[i] = r.ok() ? r->status : -1;
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(status[i], 200) << "request " << i;
  for (const char* w : {"worker=\"worker0\"", "worker=\"worker1\""})
    EXPECT_GE(scheduler_metric("tessera_scheduler_routed_requests_total", w), 1.0) << w << " got no traffic";

  up.signal(SIGTERM);
  EXPECT_EQ(up.wait_exit(milliseconds(30000)), 0);
  EXPECT_TRUE(wait_until([&] { return port_free(base) && port_free(base + 2) && port_free(base + 3); }, milliseconds(5000)));
}

}  // namespace
}  // namespace tessera::testing::cluster_test
