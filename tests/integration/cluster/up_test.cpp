// `tessera up` end to end: with --synth-like it synthesizes a random-weight model, labels it so in
// /v1/models, answers a completion and `tessera bench`, and stops every child on SIGTERM; with no --model it serves
// the stories260K demo model, its workers and kvstore serve /metrics, and its shutdown drains a
// live stream; with --workers 2 both workers register and get traffic; a worker that keeps
// failing is left stopped while the other serves (the restart budget is per child and per
// window); a taken port or a missing model fails at once, never "cluster ready"; the tests'
// start_up retries on fresh ports only when a port was taken.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <random>
#include <iterator>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/common/metrics.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/ports.h"
#include "tessera/testing/up_start.h"

namespace tessera::testing::cluster_test {
namespace {

// A base port with base .. base+13 free, below the ephemeral range (ports.h; tessera up with
// --scheduler-port base+2 needs http, zmq, scheduler x3, kvstore (--kvstore-port base+5), kvstore
// metrics (scheduler-port + 4) and worker metrics (scheduler-port + 10 + i)). The tests that start
// a cluster draw theirs through start_up (up_start.h), which draws a fresh block and starts again
// when a port of the block was taken before `up` bound it; this one is for the test that takes
// a port itself.
int free_port_block() {
  return tessera::testing::free_port_block(14, static_cast<unsigned>(::getpid()) ^ static_cast<unsigned>(std::random_device{}()));
}

// `tessera up` on the block at `base` (HTTP base, ZeroMQ base+1, scheduler base+2, kvstore
// base+5), its files under `dir`, one worker thread each, then `extra`.
std::vector<std::string> up_args(int base, const std::string& dir, std::vector<std::string> extra) {
  std::vector<std::string> a{"up", "--http-port", std::to_string(base), "--zmq-port", std::to_string(base + 1),
                             "--scheduler-port", std::to_string(base + 2), "--kvstore-port", std::to_string(base + 5),
                             "--data-dir", dir, "--worker-threads", "1"};
  a.insert(a.end(), std::make_move_iterator(extra.begin()), std::make_move_iterator(extra.end()));
  return a;
}

// The pid of the live `binary` child of `parent` whose arguments hold `arg` (e.g. its --name), or 0.
pid_t child_pid(pid_t parent, const std::string& binary, const std::string& arg) {
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
    if (args.find(binary) != std::string::npos && args.find(" " + arg + " ") != std::string::npos) {
      found = static_cast<pid_t>(std::stol(pid));
      break;
    }
  }
  ::closedir(proc);
  return found;
}

// The pid of the live tessera-worker child of `parent` named `name` (--name), or 0.
pid_t worker_pid(pid_t parent, const std::string& name) { return child_pid(parent, "tessera-worker", name); }

// A process's arguments, space-separated (with a trailing space).
std::string cmdline(pid_t pid) {
  std::ifstream cmd("/proc/" + std::to_string(pid) + "/cmdline");
  std::string args((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
  std::replace(args.begin(), args.end(), '\0', ' ');
  return args;
}

bool file_contains(const std::string& path, const std::string& text) {
  std::ifstream f(path);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return all.find(text) != std::string::npos;
}

TEST(TesseraUp, SynthesizedModelServesAndStopsCleanly) {
  const std::string dir = testing::make_temp_dir("tessera-up");
  UpStart started = start_up([&](int base) {
    return up_args(base, dir, {"--synth-like", "stories260k", "--num-pages", "256", "--restart", "never"});
  }, dir + "/up.log", milliseconds(60000));
  ASSERT_GT(started.base, 0) << "no free block of 14 loopback ports";
  const int base = started.base;
  Process& up = *started.up;
  const std::string& ready = started.ready;
  ASSERT_FALSE(ready.empty()) << "tessera up never became ready";
  // Secure with no configuration: a CURVE key set was made in the data dir for every child.
  EXPECT_TRUE(file_contains(dir + "/keys/scheduler.key_secret", "secret-key = "));
  EXPECT_TRUE(file_contains(dir + "/up.log", "generated a CURVE key set in " + dir + "/keys"));

  auto models = http::request({.port = base, .method = "GET", .path = "/v1/models", .timeout_ms = 5000});
  ASSERT_TRUE(models.ok()) << models.error().to_string();
  EXPECT_NE(models->body.find("random-weights"), std::string::npos) << models->body;
  // ignore_eos: sampled (temperature 1) from random weights, EOS can come within 8 tokens.
  auto r = http::request({.port = base, .method = "POST", .path = "/v1/completions",
                                .body = R"({"prompt": "Once upon a time", "max_tokens": 8, "ignore_eos": true})",
                                .timeout_ms = 20000});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->status, 200) << r->body;
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["usage"]["completion_tokens"].get<int>(), 8) << r->body;

  // `tessera bench` against it counts every generated token (streamed usage, which the frontend
  // sends only when asked with stream_options.include_usage, as OpenAI does).
  Process bench(testing::bin_path("tessera"),
                {"bench", "--port", std::to_string(base), "--num-requests", "4", "--concurrency", "2", "--max-tokens", "8",
                 "--prompt-words", "4", "--progress-s", "0", "--json", dir + "/bench.json"},
                dir + "/bench.log");
  ASSERT_EQ(bench.wait_exit(milliseconds(60000)), 0);
  std::ifstream bench_json(dir + "/bench.json");
  auto report = nlohmann::json::parse(bench_json, nullptr, false);
  ASSERT_FALSE(report.is_discarded());
  EXPECT_EQ(report["failed"].get<int>(), 0) << report.dump();
  EXPECT_EQ(report["completion_tokens"].get<int>(), 4 * 8) << report.dump();
  EXPECT_GT(report["output_tokens_per_s"].get<double>(), 0.0) << report.dump();

  up.signal(SIGTERM);
  EXPECT_EQ(up.wait_exit(milliseconds(30000)), 0);
  // Every child is gone: nothing listens on the HTTP or scheduler ports any more.
  EXPECT_TRUE(wait_until([&] { return port_free(base) && port_free(base + 2) && port_free(base + 3); }, milliseconds(5000)));
}

// --placement-rules reaches every worker: a rules file the worker cannot apply stops the
// cluster (--restart never), the worker's error naming the file and line.
TEST(TesseraUp, PlacementRulesReachTheWorkers) {
  const std::string dir = testing::make_temp_dir("tessera-up-rules");
  std::ofstream(dir + "/rules.yaml") << "rules:\n  - kind: attention\n    device: cuda\n";
  UpStart started = start_up([&](int base) {
    return up_args(base, dir,
                   {"--synth-like", "stories260k", "--num-pages", "256", "--restart", "never", "--placement-rules", dir + "/rules.yaml"});
  }, dir + "/up.log", milliseconds(60000));
  ASSERT_GT(started.base, 0) << "no free block of 14 loopback ports";
  Process& up = *started.up;
  EXPECT_TRUE(started.ready.empty());
  EXPECT_EQ(up.wait_exit(milliseconds(60000)), 1);
  EXPECT_TRUE(file_contains(dir + "/up.log", dir + "/rules.yaml:2: device cuda: this worker runs the cpu backend"));
}

// --workers 2: both workers register before "ready", and concurrent requests reach both.
TEST(TesseraUp, TwoWorkersBothGetTraffic) {
  const std::string dir = testing::make_temp_dir("tessera-up");
  UpStart started = start_up([&](int base) {
    return up_args(base, dir, {"--workers", "2", "--num-pages", "256", "--restart", "never"});
  }, dir + "/up.log", milliseconds(60000));
  ASSERT_GT(started.base, 0) << "no free block of 14 loopback ports";
  const int base = started.base;
  Process& up = *started.up;
  const std::string& ready = started.ready;
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
  const std::string dir = testing::make_temp_dir("tessera-up");
  const std::string log = dir + "/up.log";
  UpStart started = start_up([&](int base) {
    return up_args(base, dir, {"--workers", "2", "--num-pages", "256", "--max-restarts", "1", "--restart-window-s", "600"});
  }, log, milliseconds(60000));
  ASSERT_GT(started.base, 0) << "no free block of 14 loopback ports";
  const int base = started.base;
  Process& up = *started.up;
  ASSERT_FALSE(started.ready.empty()) << "never ready";
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

// No --model: the stories260K demo model (readable stories); the workers and the kvstore serve
// /metrics on their derived ports; SIGTERM to `up` drains: a stream in flight still ends with
// [DONE] and its finish reason.
TEST(TesseraUp, DemoModelMetricsAndDrainingShutdown) {
  const std::string dir = testing::make_temp_dir("tessera-up");
  UpStart started = start_up([&](int base) {
    return up_args(base, dir, {"--num-pages", "256", "--restart", "never"});
  }, dir + "/up.log", milliseconds(60000));
  ASSERT_GT(started.base, 0) << "no free block of 14 loopback ports";
  const int base = started.base;
  Process& up = *started.up;
  ASSERT_FALSE(started.ready.empty()) << "never ready";
  auto models = http::request({.port = base, .method = "GET", .path = "/v1/models", .timeout_ms = 5000});
  ASSERT_TRUE(models.ok());
  EXPECT_NE(models->body.find("\"stories260K\""), std::string::npos) << models->body;
  const GreedyCase g = greedy_cases().at(0);
  auto r = http::request({.port = base, .method = "POST", .path = "/v1/completions",
                          .body = nlohmann::json{{"prompt", g.prompt}, {"max_tokens", g.steps}, {"temperature", 0}}.dump(),
                          .timeout_ms = 20000});
  ASSERT_TRUE(r.ok() && r->status == 200);
  const std::string text = nlohmann::json::parse(r->body)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text.substr(0, g.completion.size()), g.completion) << "the demo model should write its story";

  for (int port : {base + 6, base + 12}) {  // kvstore: scheduler-port + 4; worker0: scheduler-port + 10
    auto m = http::request({.port = port, .method = "GET", .path = "/metrics", .timeout_ms = 5000});
    ASSERT_TRUE(m.ok()) << "port " << port << ": " << m.error().to_string();
    EXPECT_EQ(m->status, 200);
    EXPECT_NE(m->body.find(port == base + 6 ? "tessera_kvstore_l1_entries" : "tessera_worker_info{"), std::string::npos)
        << m->body;
  }

  // A stream in flight when `up` gets SIGTERM: the frontend drains it to the end.
  std::atomic<int> chunks{0};
  std::string last_event;
  std::thread stream([&] {
    http::SseParser sse;
    (void)http::request({.port = base, .method = "POST", .path = "/v1/completions",
                         .body = R"({"prompt": "Once upon a time", "max_tokens": 300, "ignore_eos": true, "stream": true})",
                         .timeout_ms = 60000,
                         .on_body = [&](std::string_view bytes) {
                           sse.feed(bytes, [&](const std::string& data) {
                             last_event = data;
                             ++chunks;
                           });
                           return true;
                         }});
  });
  ASSERT_TRUE(wait_until([&] { return chunks.load() >= 2; }, milliseconds(20000)));
  up.signal(SIGTERM);
  stream.join();
  EXPECT_EQ(last_event, "[DONE]");
  EXPECT_GT(chunks.load(), 200) << "the stream was cut short";
  EXPECT_EQ(up.wait_exit(milliseconds(60000)), 0);
}

// Another process on the HTTP port: `up` says so and exits 1 at once, never "cluster ready".
TEST(TesseraUp, ATakenHttpPortFailsClearly) {
  const int base = free_port_block();
  ASSERT_GT(base, 0);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(base));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);  // a foreign listener: it accepts connections, answers nothing
  const std::string dir = testing::make_temp_dir("tessera-up");
  Process up(testing::bin_path("tessera"), up_args(base, dir, {"--num-pages", "64"}), dir + "/up.log");
  EXPECT_EQ(up.wait_exit(milliseconds(10000)), 1);
  EXPECT_TRUE(up.wait_line("tessera up: cluster ready", milliseconds(100)).empty());
  EXPECT_TRUE(file_contains(dir + "/up.log", "port " + std::to_string(base) + " (--http-port) on 127.0.0.1 is already in use"))
      << "no clear message in " << dir << "/up.log";
  ::close(fd);
}

// start_up (up_start.h) draws a fresh block and starts `up` again when a port of its block was
// taken between the draw and the bind — here the scheduler port, taken by a foreign listener right
// after the first draw — and only then: a failure for another reason (a missing model) is not
// retried.
TEST(TesseraUp, StartUpRetriesOnFreshPortsOnlyWhenAPortWasTaken) {
  const std::string dir = testing::make_temp_dir("tessera-up-retry");
  int taken = -1, fd = -1;
  UpStart started = start_up([&](int base) {
    if (fd < 0) {  // the first attempt only
      taken = base + 2;
      fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(taken));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
      EXPECT_EQ(::listen(fd, 16), 0);
    }
    return up_args(base, dir, {"--synth-like", "stories260k", "--num-pages", "64", "--restart", "never"});
  }, dir + "/up.log", milliseconds(60000));
  ASSERT_GT(started.base, 0) << "no free block of 14 loopback ports";
  EXPECT_EQ(started.attempts, 2);
  EXPECT_FALSE(started.ready.empty()) << "the second attempt never became ready: " << dir << "/up.log";
  EXPECT_NE(started.base + 2, taken);
  EXPECT_TRUE(file_contains(dir + "/up.log.in-use-1", "port " + std::to_string(taken) + " (--scheduler-port) on 127.0.0.1 is already in use"))
      << "the first attempt's log was not kept, or failed for another reason";
  started.up->signal(SIGTERM);
  EXPECT_EQ(started.up->wait_exit(milliseconds(30000)), 0);
  ::close(fd);

  UpStart missing = start_up([&](int) { return std::vector<std::string>{"up", "--model", dir + "/no-such-model.gguf"}; },
                             dir + "/missing.log", milliseconds(10000));
  ASSERT_GT(missing.base, 0);
  EXPECT_EQ(missing.attempts, 1) << "a failure that is not a taken port was retried";
  EXPECT_TRUE(missing.ready.empty());
  EXPECT_EQ(missing.up->wait_exit(milliseconds(10000)), 2);
}

// A --model path that does not exist: exit 2 at once naming it (no child started, no retries).
TEST(TesseraUp, AMissingModelFailsFast) {
  const std::string dir = testing::make_temp_dir("tessera-up");
  const auto t0 = std::chrono::steady_clock::now();
  Process up(testing::bin_path("tessera"), {"up", "--model", dir + "/no-such-model.gguf"}, dir + "/up.log");
  EXPECT_EQ(up.wait_exit(milliseconds(10000)), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE(file_contains(dir + "/up.log", "--model " + dir + "/no-such-model.gguf: no such file or directory"));
}

// A mixture-of-experts GGUF (Qwen2-MoE-shaped, Q4_K_M, with a Jinja chat template in its
// metadata, as llama.cpp's converter writes it) is served by `tessera up --model`: the frontend
// renders the model's own template and the worker's CPU engine runs the routed experts.
TEST(TesseraUp, AMixtureOfExpertsModelServesWithItsChatTemplate) {
  const std::string dir = testing::make_temp_dir("tessera-up-moe");
  {
    std::ofstream t(dir + "/template.jinja");
    t << "MOE-CHAT{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}\n{% endfor %}"
         "{% if add_generation_prompt %}[ASSISTANT]{% endif %}";
  }
  const std::string model = dir + "/qwen2moe.gguf";
  Process synth(testing::bin_path("tessera"),
                {"model", "synth", "--like", "qwen2-moe-a2.7b-reduced", "--dtype", "q4_k_m", "--out", model,
                 "--chat-template-file", dir + "/template.jinja"},
                dir + "/synth.log");
  ASSERT_EQ(synth.wait_exit(milliseconds(60000)), 0);
  UpStart started = start_up([&](int base) {
    return up_args(base, dir, {"--model", model, "--num-pages", "256", "--restart", "never"});
  }, dir + "/up.log", milliseconds(60000));
  ASSERT_GT(started.base, 0) << "no free block of 14 loopback ports";
  const int base = started.base;
  Process& up = *started.up;
  ASSERT_FALSE(started.ready.empty()) << "tessera up never became ready";
  EXPECT_TRUE(file_contains(dir + "/up.log", "(the model's own, rendered by tessera_jinja)"));

  const std::string messages = R"({"messages": [{"role": "user", "content": "hello there"}]})";
  auto tok = http::request({.port = base, .method = "POST", .path = "/tokenize", .body = messages, .timeout_ms = 5000});
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  ASSERT_EQ(tok->status, 200) << tok->body;
  const auto tj = nlohmann::json::parse(tok->body);
  auto text = http::request({.port = base, .method = "POST", .path = "/detokenize",
                             .body = nlohmann::json{{"tokens", tj["tokens"]}}.dump(), .timeout_ms = 5000});
  ASSERT_TRUE(text.ok()) << text.error().to_string();
  EXPECT_NE(text->body.find("MOE-CHAT[USER] hello there\\n[ASSISTANT]"), std::string::npos) << text->body;

  auto r = http::request({.port = base, .method = "POST", .path = "/v1/chat/completions",
                          .body = R"({"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 6})",
                          .timeout_ms = 20000});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->status, 200) << r->body;
  const auto j = nlohmann::json::parse(r->body, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["usage"]["prompt_tokens"].get<int>(), tj["count"].get<int>()) << r->body;
  EXPECT_GE(j["usage"]["completion_tokens"].get<int>(), 1) << r->body;
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string()) << r->body;

  up.signal(SIGTERM);
  EXPECT_EQ(up.wait_exit(milliseconds(30000)), 0);
}

// The worker's K/V offload and CacheBlend options and the scheduler's offload options and step
// budget, given to `tessera up`, reach the children (docs/kv.md): the worker runs its offloader
// (its series in /metrics) with the codec given; options not given are not passed (a [worker]
// section applies).
TEST(TesseraUp, KvOffloadAndBlendOptionsReachTheChildren) {
  const std::string dir = testing::make_temp_dir("tessera-up-offload");
  UpStart started = start_up([&](int base) {
    return up_args(base, dir, {"--synth-like", "stories260k", "--num-pages", "256", "--restart", "never", "--kv-offload", "true",
                               "--kv-offload-codec", "zstd", "--blend-cache-mb", "3", "--kv-offload-min-pages", "2",
                               "--max-step-tokens", "96", "--min-step-ms", "1"});
  }, dir + "/up.log", milliseconds(60000));
  ASSERT_GT(started.base, 0) << "no free block of 14 loopback ports";
  const int base = started.base;
  Process& up = *started.up;
  ASSERT_FALSE(started.ready.empty()) << dir << "/up.log";
  const std::string worker = cmdline(worker_pid(up.pid(), "worker0"));
  EXPECT_NE(worker.find(" --kv-offload true "), std::string::npos) << worker;
  EXPECT_NE(worker.find(" --kv-offload-codec zstd "), std::string::npos) << worker;
  EXPECT_NE(worker.find(" --blend-cache-mb 3 "), std::string::npos) << worker;
  EXPECT_NE(worker.find(" --min-step-ms 1 "), std::string::npos) << "the worker's pacing: " << worker;
  EXPECT_EQ(worker.find("--blend-recompute-ratio"), std::string::npos) << "not given, not passed: " << worker;
  const std::string sched = cmdline(child_pid(up.pid(), "tessera-scheduler", "--worker-endpoint"));
  EXPECT_NE(sched.find(" --kv-offload-min-pages 2 "), std::string::npos) << sched;
  EXPECT_NE(sched.find(" --max-step-tokens 96 "), std::string::npos) << "CacheBlend's step budget: " << sched;
  auto m = http::request({.port = base + 2 + 10, .method = "GET", .path = "/metrics", .timeout_ms = 5000});
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_NE(m->body.find("tessera_worker_kv_offload_pages_total"), std::string::npos) << "the offloader runs";
  up.signal(SIGTERM);
  EXPECT_EQ(up.wait_exit(milliseconds(30000)), 0);
}

// --kv-offload without the kvstore: exit 2 at once, saying why.
TEST(TesseraUp, KvOffloadWithoutTheKvstoreFailsFast) {
  const std::string dir = testing::make_temp_dir("tessera-up-offload");
  Process up(testing::bin_path("tessera"),
             {"up", "--synth-like", "stories260k", "--data-dir", dir, "--kvstore", "false", "--kv-offload", "true"},
             dir + "/up.log");
  EXPECT_EQ(up.wait_exit(milliseconds(10000)), 2);
  EXPECT_TRUE(file_contains(dir + "/up.log", "--kv-offload needs the kvstore")) << dir << "/up.log";
}

}  // namespace
}  // namespace tessera::testing::cluster_test
