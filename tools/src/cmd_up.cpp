// `tessera up [--config FILE]`: the whole single-machine cluster as child processes —
// tessera-scheduler, --workers CPU tessera-workers (default 1; named worker0, worker1, ...; the
// scheduler routes between them), tessera-frontend on 127.0.0.1:8000, and tessera-kvstore when
// that binary is installed next to `tessera` — on loopback endpoints. "Ready" means /ready
// answers 200 and every worker has registered with the scheduler.
//
// Options are declared once (table below; [up] section of the config file, flags, TESSERA_UP_*
// environment variables). The same --config FILE is passed to every child, which reads its own
// section ([scheduler], [worker], [frontend], [kvstore]); use sections only in such a file.
// `tessera up` itself sets only what links the processes (endpoints, model, ports, pool size):
// those come from the [up] section or flags and win over the children's sections.
//
// No --model: a small random-weight model is synthesized once (tessera model synth, cached in
// --data-dir) and served under a name ending in "-random-weights"; logs say so and say how to
// serve a real model (--model PATH).
//
// Supervision: a child that exits on its own is reported (name, pid, status). With
// --restart on-failure (default) it is restarted after a 1 s back-off, at most --max-restarts
// times per child; after that, or with --restart never, everything is shut down and `tessera up`
// exits 1. SIGINT/SIGTERM: SIGTERM to frontend, worker, kvstore, scheduler in that order, 10 s
// grace each, then SIGKILL; exit 0.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench/http_client.h"
#include "tessera/common/config.h"
#include "tessera/common/log.h"
#include "tessera/common/metrics.h"
#include "tessera/tools/command.h"

namespace tessera::tools {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::atomic<int> g_signal{0};
extern "C" void up_on_signal(int sig) { g_signal.store(sig); }

void declare_up_options(config::Options& o) {
  using config::Type;
  o.add({.name = "model", .type = Type::kString, .default_value = "",
         .help = "model to serve (GGUF file, safetensors directory, llama2.c .bin); \"\" = synthesize a random-weight one",
         .env = "TESSERA_UP_MODEL"});
  o.add({.name = "tokenizer", .type = Type::kString, .default_value = "",
         .help = "tokenizer file when the model has none embedded (llama2.c: tokenizer.bin)", .env = "TESSERA_UP_TOKENIZER"});
  o.add({.name = "synth-like", .type = Type::kString, .default_value = "stories260k",
         .help = "shape of the synthesized model when no --model is given (tessera model synth --like)",
         .env = "TESSERA_UP_SYNTH_LIKE"});
  o.add({.name = "host", .type = Type::kString, .default_value = "127.0.0.1", .help = "HTTP listen address",
         .env = "TESSERA_UP_HOST"});
  o.add({.name = "http-port", .type = Type::kInt, .default_value = "8000", .help = "frontend HTTP port",
         .env = "TESSERA_UP_HTTP_PORT", .min = 1, .max = 65535});
  o.add({.name = "zmq-port", .type = Type::kInt, .default_value = "8001", .help = "frontend ZeroMQ client API port",
         .env = "TESSERA_UP_ZMQ_PORT", .min = 1, .max = 65535});
  o.add({.name = "scheduler-port", .type = Type::kInt, .default_value = "8100",
         .help = "scheduler ports: this one for frontends, +1 for workers, +2 for its /metrics", .env = "TESSERA_UP_SCHEDULER_PORT",
         .min = 1, .max = 65533});
  o.add({.name = "kvstore-port", .type = Type::kInt, .default_value = "8103", .help = "kvstore port",
         .env = "TESSERA_UP_KVSTORE_PORT", .min = 1, .max = 65535});
  o.add({.name = "kvstore", .type = Type::kBool, .default_value = "true",
         .help = "start tessera-kvstore (when the binary exists)", .env = "TESSERA_UP_KVSTORE"});
  o.add({.name = "num-pages", .type = Type::kInt, .default_value = "2048", .help = "worker K/V pages",
         .env = "TESSERA_UP_NUM_PAGES", .min = 1, .max = 1 << 24});
  o.add({.name = "workers", .type = Type::kInt, .default_value = "1",
         .help = "CPU workers to start (each loads the model and has its own pool of num-pages pages)",
         .env = "TESSERA_UP_WORKERS", .min = 1, .max = 64});
  o.add({.name = "worker-threads", .type = Type::kInt, .default_value = "0",
         .help = "compute threads per worker (0 = the machine's cores divided among the workers, at least 1)",
         .env = "TESSERA_UP_WORKER_THREADS", .min = 0, .max = 1024});
  o.add({.name = "prefix-cache", .type = Type::kBool, .default_value = "true", .help = "scheduler prefix caching",
         .env = "TESSERA_UP_PREFIX_CACHE"});
  o.add({.name = "data-dir", .type = Type::kString, .default_value = "",
         .help = "where synthesized models are kept (\"\" = $TMPDIR/tessera-up-<uid>)", .env = "TESSERA_UP_DATA_DIR"});
  o.add({.name = "restart", .type = Type::kString, .default_value = "on-failure",
         .help = "a child that exits: on-failure = restart it (max-restarts), never = stop the whole cluster",
         .env = "TESSERA_UP_RESTART", .choices = {"on-failure", "never"}});
  o.add({.name = "max-restarts", .type = Type::kInt, .default_value = "3", .help = "restarts per child before giving up",
         .env = "TESSERA_UP_MAX_RESTARTS", .min = 0, .max = 1000});
  o.add({.name = "ready-timeout-ms", .type = Type::kInt, .default_value = "120000",
         .help = "how long to wait for /ready before giving up", .env = "TESSERA_UP_READY_TIMEOUT_MS", .min = 100,
         .max = 3600000});
  o.add({.name = "log-level", .type = Type::kString, .default_value = "info", .help = "log level (also passed to children)",
         .env = "TESSERA_LOG_LEVEL", .choices = {"debug", "info", "warn", "error", "off"}});
}

struct ChildSpec {
  std::string name;  // "scheduler", "worker", ...
  std::string binary;
  std::vector<std::string> args;
  pid_t pid = -1;
  int restarts = 0;
};

pid_t spawn(const ChildSpec& c) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // a terminal's Ctrl-C reaches `tessera up` only; it stops the children in order
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(c.binary.c_str()));
    for (const auto& a : c.args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(c.binary.c_str(), argv.data());
    std::fprintf(stderr, "tessera up: cannot run %s: %s\n", c.binary.c_str(), std::strerror(errno));
    _exit(127);
  }
  return pid;
}

std::string describe_status(int st) {
  if (WIFEXITED(st)) return "exit status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return std::string("signal ") + strsignal(WTERMSIG(st));
  return "status " + std::to_string(st);
}

// Runs a command to completion (used for `tessera model synth`).
int run_sync(const std::string& binary, const std::vector<std::string>& args) {
  ChildSpec c{.name = "synth", .binary = binary, .args = args};
  pid_t pid = spawn(c);
  int st = 0;
  if (pid < 0 || ::waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void stop_all(std::vector<ChildSpec>& children) {
  // Reverse dependency order: frontend (stops taking requests), worker, kvstore, scheduler.
  for (const char* name : {"frontend", "worker", "kvstore", "scheduler"}) {
    for (auto& c : children) {
      if (c.name != name || c.pid <= 0) continue;
      ::kill(c.pid, SIGTERM);
      const auto deadline = Clock::now() + milliseconds(10000);
      int st = 0;
      pid_t r = 0;
      while ((r = ::waitpid(c.pid, &st, WNOHANG)) == 0 && Clock::now() < deadline)
        std::this_thread::sleep_for(milliseconds(20));  // polling the child's exit, bounded
      if (r == 0) {
        TS_LOG(kWarn) << c.name << " (pid " << c.pid << ") ignored SIGTERM for 10 s: SIGKILL";
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, &st, 0);
      }
      TS_LOG(kInfo) << c.name << " (pid " << c.pid << ") stopped: " << describe_status(st);
      c.pid = -1;
    }
  }
}

// tessera_scheduler_live_workers from the scheduler's /metrics; -1 when unreadable.
int live_workers(int metrics_port) {
  auto r = bench::http_request({.port = metrics_port, .method = "GET", .path = "/metrics", .timeout_ms = 1000});
  if (!r.ok() || r->status != 200) return -1;
  auto samples = metrics::parse_text(r->body);
  if (!samples.ok()) return -1;
  for (const auto& s : *samples)
    if (s.name == "tessera_scheduler_live_workers") return static_cast<int>(s.value);
  return -1;
}

int run_up(const std::vector<std::string>& args) {
  log::set_component("up");
  config::Options o("tessera up", "up");
  declare_up_options(o);
  if (Status st = o.parse(args); !st.ok()) {
    std::fprintf(stderr, "tessera up: %s\n", st.error().message.c_str());
    return 2;
  }
  if (o.help_requested()) {
    std::printf("usage: tessera up [--config FILE] [options]\n%s", o.help().c_str());
    return 0;
  }
  log::set_level(o.get("log-level"));
  std::string config_file;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) config_file = args[i + 1];
    if (args[i].rfind("--config=", 0) == 0) config_file = args[i].substr(9);
  }

  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path bin_dir = ec ? fs::path(".") : self.parent_path();
  auto bin = [&](const char* name) { return (bin_dir / name).string(); };
  for (const char* required : {"tessera-scheduler", "tessera-worker", "tessera-frontend"}) {
    if (!fs::exists(bin(required))) {
      std::fprintf(stderr, "tessera up: %s not found next to tessera (in %s); build it first\n", required, bin_dir.c_str());
      return 1;
    }
  }

  std::string model = o.get("model");
  std::string tokenizer = o.get("tokenizer");
  std::string model_name;
  if (model.empty()) {
    std::string dir = o.get("data-dir");
    if (dir.empty()) dir = (fs::temp_directory_path() / ("tessera-up-" + std::to_string(::getuid()))).string();
    fs::create_directories(dir, ec);
    const std::string like = o.get("synth-like");
    model = dir + "/" + like + "-random.gguf";
    if (!fs::exists(model)) {
      TS_LOG(kInfo) << "synthesizing a " << like << "-shaped model with random weights: " << model;
      if (run_sync(self.string(), {"model", "synth", "--like", like, "--dtype", "f32", "--out", model}) != 0) {
        std::fprintf(stderr, "tessera up: could not synthesize a model (tessera model synth --like %s failed)\n", like.c_str());
        return 1;
      }
    }
    model_name = like + "-random-weights";
    TS_LOG(kWarn) << "no --model given: serving '" << model_name << "', a SYNTHESIZED model with RANDOM WEIGHTS; "
                  << "its output is meaningless text. Serve a real model with: tessera up --model PATH "
                  << "(GGUF file, Hugging Face safetensors directory, or llama2.c .bin with --tokenizer tokenizer.bin)";
  }

  const std::string lo = "tcp://127.0.0.1:";
  const int sp = static_cast<int>(o.get_int("scheduler-port"));
  const std::string sched_fe = lo + std::to_string(sp), sched_we = lo + std::to_string(sp + 1);
  std::vector<std::string> common;
  if (!config_file.empty()) common = {"--config", config_file};
  common.insert(common.end(), {"--log-level", o.get("log-level")});
  auto with_common = [&](std::vector<std::string> a) {
    a.insert(a.begin(), common.begin(), common.end());
    return a;
  };

  std::vector<ChildSpec> children;
  children.push_back({.name = "scheduler", .binary = bin("tessera-scheduler"),
                      .args = with_common({"--frontend-endpoint", sched_fe, "--worker-endpoint", sched_we, "--metrics-port",
                                           std::to_string(sp + 2), "--prefix-cache", o.get_bool("prefix-cache") ? "true" : "false"})});
  const bool with_kvstore = o.get_bool("kvstore") && fs::exists(bin("tessera-kvstore"));
  if (with_kvstore)
    children.push_back({.name = "kvstore", .binary = bin("tessera-kvstore"),
                        .args = with_common({"--listen", lo + std::to_string(o.get_int("kvstore-port"))})});
  const int num_workers = static_cast<int>(o.get_int("workers"));
  int64_t threads = o.get_int("worker-threads");
  if (threads == 0 && num_workers > 1)
    threads = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()) / num_workers);
  for (int i = 0; i < num_workers; ++i) {
    std::vector<std::string> worker_args = {"--model", model, "--scheduler", sched_we, "--num-pages", o.get("num-pages"),
                                            "--threads", std::to_string(threads), "--name", "worker" + std::to_string(i)};
    // dki: the worker fetches and stores preference K/V there (docs/preference.md).
    if (with_kvstore) worker_args.insert(worker_args.end(), {"--kvstore", lo + std::to_string(o.get_int("kvstore-port"))});
    children.push_back({.name = "worker", .binary = bin("tessera-worker"), .args = with_common(worker_args)});
  }
  std::vector<std::string> fe = {"--host", o.get("host"), "--http-port", o.get("http-port"), "--zmq-endpoint",
                                 lo + std::to_string(o.get_int("zmq-port")), "--schedulers", sched_fe, "--model", model};
  if (!tokenizer.empty()) fe.insert(fe.end(), {"--tokenizer", tokenizer});
  if (!model_name.empty()) fe.insert(fe.end(), {"--model-name", model_name});
  // dki: stored preferences and admin invalidation (docs/api.md "Admin"; token: TESSERA_ADMIN_TOKEN).
  if (with_kvstore) fe.insert(fe.end(), {"--kvstore", lo + std::to_string(o.get_int("kvstore-port"))});
  children.push_back({.name = "frontend", .binary = bin("tessera-frontend"), .args = with_common(fe)});

  std::signal(SIGINT, up_on_signal);
  std::signal(SIGTERM, up_on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  for (auto& c : children) {
    c.pid = spawn(c);
    TS_LOG(kInfo) << "started " << c.name << " (pid " << c.pid << ")";
  }

  const int http_port = static_cast<int>(o.get_int("http-port"));
  const auto ready_deadline = Clock::now() + milliseconds(o.get_int("ready-timeout-ms"));
  bool ready = false, announced_wait = false;
  const std::string restart = o.get("restart");
  const int max_restarts = static_cast<int>(o.get_int("max-restarts"));
  int exit_code = 0;
  while (g_signal.load() == 0) {
    // Reap children that exited on their own.
    int st = 0;
    pid_t pid;
    bool give_up = false;
    while ((pid = ::waitpid(-1, &st, WNOHANG)) > 0) {
      for (auto& c : children) {
        if (c.pid != pid) continue;
        c.pid = -1;
        TS_LOG(kError) << c.name << " (pid " << pid << ") exited unexpectedly: " << describe_status(st);
        if (restart == "on-failure" && c.restarts < max_restarts) {
          ++c.restarts;
          std::this_thread::sleep_for(milliseconds(1000));  // restart back-off
          c.pid = spawn(c);
          TS_LOG(kWarn) << "restarted " << c.name << " (pid " << c.pid << "), restart " << c.restarts << " of " << max_restarts;
        } else {
          give_up = true;
        }
      }
    }
    if (give_up) {
      TS_LOG(kError) << "a child cannot be kept running (--restart " << restart << "): shutting the cluster down";
      exit_code = 1;
      break;
    }
    if (!ready) {
      auto r = bench::http_request({.port = http_port, .method = "GET", .path = "/ready", .timeout_ms = 1000});
      if (r.ok() && r->status == 200 && live_workers(sp + 2) >= num_workers) {
        ready = true;
        std::printf("tessera up: cluster ready — http://%s:%d (OpenAI API), zmq %s%lld (msgpack API), scheduler metrics "
                    "http://127.0.0.1:%d/metrics\n  try: curl -s http://127.0.0.1:%d/v1/completions -H 'Content-Type: "
                    "application/json' -d '{\"prompt\": \"Once upon a time\", \"max_tokens\": 32}'\n",
                    o.get("host").c_str(), http_port, lo.c_str(), static_cast<long long>(o.get_int("zmq-port")), sp + 2,
                    http_port);
        if (num_workers > 1) std::printf("tessera up: %d workers registered (worker0 .. worker%d)\n", num_workers, num_workers - 1);
        std::fflush(stdout);
      } else if (Clock::now() > ready_deadline) {
        TS_LOG(kError) << "the cluster did not become ready within " << o.get_int("ready-timeout-ms") << " ms";
        exit_code = 1;
        break;
      } else if (!announced_wait) {
        announced_wait = true;
        TS_LOG(kInfo) << "waiting for http://127.0.0.1:" << http_port << "/ready";
      }
    }
    std::this_thread::sleep_for(milliseconds(200));  // supervision tick
  }
  if (g_signal.load() != 0) {
    TS_LOG(kInfo) << "signal " << g_signal.load() << ": stopping the cluster";
  }
  stop_all(children);
  return exit_code;
}

}  // namespace

TESSERA_COMMAND("up", "start a single-machine cluster (scheduler, CPU workers, frontend, kvstore) and supervise it", run_up);

}  // namespace tessera::tools
