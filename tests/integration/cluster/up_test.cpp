// `tessera up` end to end: with no --model it synthesizes a random-weight model, labels it so in
// /v1/models, answers a completion, and stops every child on SIGTERM; with --workers 2 both
// workers register and get traffic; a worker that keeps failing is left stopped while the other
// serves (the restart budget is per child and per window).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
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

// The pid of the live tessera-worker child of `parent` named `name` (--name), or 0.
pid_t worker_pid(pid_t parent, const std::string& name) {
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  pid_t found = 0;
  while (dirent* e = ::readdir(proc)) {
    const std::string pid = e->d_name;
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat("/proc/" + pid + "/stat");
    std::string stat_line;
    std::getline(stat, stat_line);
    const size_t close = stat_line.rfind(')');  // comm may hold spaces: fields follow the last ')'
    if (close == std::string::npos) continue;
    std::istringstream fields(stat_line.substr(close + 2));
    char state = 0;
    long ppid = 0;
    fields >> state >> ppid;
    if (ppid != parent || state == 'Z') continue;
    std::ifstream cmd("/proc/" + pid + "/cmdline");
    std::string args((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    std::replace(args.begin(), args.end(), '\0', ' ');
    if (args.find("tessera-worker") != std::string::npos && args.find(" " + name + " ") != std::string::npos) {
      found = static_cast<pid_t>(std::stol(pid));
      break;
    }
  }
  ::closedir(proc);
  return found;
}

bool file_contains(const std::string& path, const std::string& text) {
  std::ifstream f(path);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return all.find(text) != std::string::npos;
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
  // Secure with no configuration: a CURVE key set was made in the data dir for every child.
  EXPECT_TRUE(file_contains(dir + "/keys/scheduler.key_secret", "secret-key = "));
  EXPECT_TRUE(file_contains(dir + "/up.log", "generated a CURVE key set in " + dir + "/keys"));

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

// Issue 18 finding 9: a worker killed again and again uses up its own restart budget
// (--max-restarts 1 per --restart-window-s) and is then left stopped; `tessera up` keeps running
// and the other worker keeps serving.
TEST(TesseraUp, AFlappingWorkerIsLeftStoppedWhileTheOtherServes) {
  const int base = free_port_block();
  ASSERT_GT(base, 0);
  const std::string dir = testing::make_temp_dir("tessera-up");
  const std::string log = dir + "/up.log";
  Process up(testing::bin_path("tessera"),
             {"up", "--workers", "2", "--http-port", std::to_string(base), "--zmq-port", std::to_string(base + 1),
              "--scheduler-port", std::to_string(base + 2), "--kvstore-port", std::to_string(base + 5), "--data-dir", dir,
              "--worker-threads", "1", "--num-pages", "256", "--max-restarts", "1", "--restart-window-s", "600"},
             log);
  ASSERT_FALSE(up.wait_line("tessera up: cluster ready", milliseconds(60000)).empty()) << "never ready";
  const pid_t first = worker_pid(up.pid(), "worker0");
  ASSERT_GT(first, 0);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  pid_t second = 0;  // the restart (1 s back-off)
  ASSERT_TRUE(wait_until([&] {
    second = worker_pid(up.pid(), "worker0");
    return second > 0 && second != first;
  }, milliseconds(15000))) << "worker0 was not restarted";
  ASSERT_EQ(::kill(second, SIGKILL), 0);
  ASSERT_TRUE(wait_until([&] { return file_contains(log, "worker0 exited 2 times within 600 s: left stopped"); },
                         milliseconds(15000)))
      << "no give-up line in " << log;
  EXPECT_TRUE(up.alive()) << "tessera up stopped the whole cluster for one flapping worker";
  // The scheduler notices worker0 is gone (its dead timeout), then worker1 serves everything.
  const int metrics_port = base + 4;
  ASSERT_TRUE(wait_until([&] {
    auto r = http::request({.port = metrics_port, .method = "GET", .path = "/metrics", .timeout_ms = 2000});
    if (!r.ok() || r->status != 200) return false;
    auto samples = metrics::parse_text(r->body);
    if (!samples.ok()) return false;
    for (const auto& smp : *samples)
      if (smp.name == "tessera_scheduler_live_workers") return smp.value == 1.0;
    return false;
  }, milliseconds(15000)));
  auto r = http::request({.port = base, .method = "POST", .path = "/v1/completions",
                          .body = R"({"prompt": "After the flapping", "max_tokens": 8})", .timeout_ms = 30000});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(worker_pid(up.pid(), "worker0"), 0) << "worker0 came back past its budget";
  EXPECT_TRUE(up.alive());
  up.signal(SIGTERM);
  EXPECT_EQ(up.wait_exit(milliseconds(30000)), 0);
}

}  // namespace
}  // namespace tessera::testing::cluster_test
