// `tessera up [--config FILE]`: the whole single-machine cluster as child processes —
// tessera-scheduler, --workers CPU tessera-workers (default 1; named worker0, worker1, ...; the
// scheduler routes between them), tessera-frontend on 127.0.0.1:8000, and tessera-kvstore when
// that binary is installed next to `tessera` — on loopback endpoints. "Ready" means /ready
// answers 200 and every worker has registered with the scheduler.
//
// Options ([up] section of the config file, flags, TESSERA_UP_* environment variables): `up`'s
// own are declared below; those it shares with its children (model, tokenizer, host, http-port,
// num-pages, kv-dtype, kv-memory-mb, prefix-cache, log-level) are the children's declarations,
// re-exported (ChildTables) and forwarded by name; the workers' K/V offload and CacheBlend options
// and the scheduler's offload ones only when given (bench/up_forward.h). Every argument passed to a child is checked
// against that child's table first. The same --config FILE is passed to every child, which reads
// its own section ([scheduler], [worker], [frontend], [kvstore]); use sections only in such a
// file. `tessera up` itself sets only what links the processes (endpoints, model, ports, pool size): those come
// from the [up] section or flags and win over the children's sections.
//
// Security: every child gets the same --curve-dir (CURVE on every internal socket,
// docs/security.md). Without --curve-dir, `up` uses <data-dir>/keys and generates a key set
// there on first start, so a single machine is secure with no configuration; --insecure passes
// --insecure to every child instead.
//
// No --model: the stories260K demo model of the test data (../shared/models/stories260K, found
// through $TESSERA_SHARED_DIR, the build's TESSERA_SHARED_DIR, ./../shared or next to the
// checkout) is served as "stories260K"; without it, a small random-weight model is synthesized
// once (tessera model synth, cached in --data-dir) and served under a name ending in
// "-random-weights"; logs say so and say how to serve a real model (--model PATH).
//
// Honest start-up: a --model or --tokenizer path that does not exist fails at once (exit 2); a
// port a child must bind that another process holds fails at once (exit 1); the readiness probe
// counts only answers that echo the frontend's --instance-id (random per run), so a foreign
// process on the HTTP port is reported, never taken for the cluster.
//
// Supervision: a child that exits on its own is reported (name, pid, status). With
// --restart on-failure (default) it is restarted after a 1 s back-off, at most --max-restarts
// times per child within any --restart-window-s (a rate, so a child that fails now and then
// over days is always restarted). A worker past its budget is left stopped while another worker
// still runs (one flapping worker never stops the healthy ones); the scheduler, the frontend,
// the kvstore or the last worker past its budget, or any child with --restart never, shuts
// everything down and `tessera up` exits 1. SIGINT/SIGTERM: SIGTERM to frontend, worker, kvstore, scheduler in that order
// (the frontend and the workers drain: --drain-timeout-s, forwarded), grace 10 s (+ the drain
// timeout for those two) each, then SIGKILL; exit 0.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "scheduler_options.h"
#include "tessera/common/child_process.h"
#include "tessera/common/config.h"
#include "tessera/common/curve.h"
#include "tessera/common/log.h"
#include "tessera/common/metrics.h"
#include "tessera/common/signals.h"
#include "tessera/frontend/frontend.h"
#include "tessera/http/client.h"
#include "tessera/kvstore/options.h"
#include "tessera/tools/command.h"
#include "bench/up_checks.h"
#include "bench/up_forward.h"
#include "worker_options.h"

namespace tessera::tools {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;


// `tessera up`'s own settings. The options it shares with its children (model, tokenizer, host,
// http-port, num-pages, kv-dtype, kv-memory-mb, prefix-cache, and the common log-level) are not
// declared here: they are re-exported from the children's tables (declare_options of each
// service), bound to members of the children's config structs below, so their type, checks and
// defaults come from there.
struct UpConfig {
  frontend::FrontendConfig frontend;        // model, tokenizer, host, http-port
  worker_app::WorkerOptions worker = [] {   // num-pages: up gives each worker a larger pool
    worker_app::WorkerOptions w;
    w.backend_options.pool.num_pages = 2048;
    return w;
  }();
  scheduler_app::SchedulerOptions scheduler;  // prefix-cache
  std::string synth_like;  // "" = the demo model when found, else "stories260k"
  int zmq_port = 8001;
  int scheduler_port = 8100;  // +1 workers, +2 /metrics
  int kvstore_port = 8103;
  bool kvstore = true;
  int workers = 1;
  int worker_threads = 0;
  std::string data_dir;
  std::string restart = "on-failure";
  int max_restarts = 3;
  int restart_window_s = 300;
  int64_t ready_timeout_ms = 120000;
  int drain_timeout_s = 30;
  int kvstore_metrics_port = 0;  // 0 = scheduler-port + 4
  int worker_metrics_port = 0;   // worker i: this + i; 0 = scheduler-port + 10
  curve::Settings curve;  // dir "" = <data-dir>/keys, generated on first start
};

// The children's option tables, bound to scratch configs: the source of the shared declarations
// and the check of every argument `up` passes to a child.
struct ChildTables {
  frontend::FrontendConfig frontend_config;
  scheduler_app::SchedulerOptions scheduler_config;
  worker_app::WorkerOptions worker_config;
  kvstore::KvstoreOptions kvstore_config;
  config::Options frontend{"tessera-frontend", "frontend"};
  config::Options scheduler{"tessera-scheduler", "scheduler"};
  config::Options worker{"tessera-worker", "worker"};
  config::Options kvstore{"tessera-kvstore", "kvstore"};
  ChildTables() {
    frontend::declare_options(frontend, frontend_config);
    scheduler_app::declare_options(scheduler, scheduler_config);
    worker_app::declare_options(worker, worker_config);
    kvstore::declare_options(kvstore, kvstore_config);
  }
};

using up::shared;  // a child's option re-exported by `up` (bench/up_forward.h)

void declare_up_options(config::Options& o, UpConfig& c, const ChildTables& t) {
  config::Option model = shared(t.worker, "model");
  model.help =
      "model to serve (GGUF file, safetensors directory, llama2.c .bin); \"\" = synthesize a random-weight one";
  o.add(c.frontend.model, std::move(model));
  config::Option tokenizer = shared(t.frontend, "tokenizer");
  tokenizer.help = "tokenizer file when the model has none embedded (llama2.c: tokenizer.bin)";
  o.add(c.frontend.tokenizer, std::move(tokenizer));
  o.add(c.synth_like, {.name = "synth-like",
                       .help = "with no --model: synthesize a random-weight model of this shape (tessera model synth "
                               "--like) instead of serving the stories260K demo model (\"\" = the demo model when "
                               "found, else stories260k)",
                       .env = "TESSERA_UP_SYNTH_LIKE"});
  o.add(c.frontend.host, shared(t.frontend, "host"));
  config::Option http_port = shared(t.frontend, "http-port");
  http_port.min = 1;  // `up` probes it for readiness: no "any free port"
  http_port.help = "frontend HTTP port (probed for readiness)";
  o.add(c.frontend.http_port, std::move(http_port));
  o.add(c.zmq_port, {.name = "zmq-port", .help = "frontend ZeroMQ client API port", .env = "TESSERA_UP_ZMQ_PORT",
                     .min = 1, .max = 65535});
  o.add(c.scheduler_port, {.name = "scheduler-port",
                           .help = "scheduler ports: this one for frontends, +1 for workers, +2 for its /metrics",
                           .env = "TESSERA_UP_SCHEDULER_PORT", .min = 1, .max = 65533});
  o.add(c.kvstore_port, {.name = "kvstore-port", .help = "kvstore port", .env = "TESSERA_UP_KVSTORE_PORT", .min = 1,
                         .max = 65535});
  o.add(c.kvstore, {.name = "kvstore", .help = "start tessera-kvstore (when the binary exists)",
                    .env = "TESSERA_UP_KVSTORE"});
  o.add(c.worker.backend_options.pool.num_pages, shared(t.worker, "num-pages"));
  o.add(c.worker.placement_rules, shared(t.worker, "placement-rules"));
  o.add(shared(t.worker, "kv-dtype"), kernels::kv_dtype_name(c.worker.backend_options.pool.dtype),
        // parse_kv_dtype cannot fail here: the value is one of the worker's choices.
        [&c](const std::string& v) { c.worker.backend_options.pool.dtype = kernels::parse_kv_dtype(v).value(); });
  o.add(c.worker.backend_options.pool.memory_mb, shared(t.worker, "kv-memory-mb"));
  o.add(c.workers, {.name = "workers",
                    .help = "CPU workers to start (each loads the model and has its own pool of num-pages pages)",
                    .env = "TESSERA_UP_WORKERS", .min = 1, .max = 64});
  o.add(c.worker_threads, {.name = "worker-threads",
                           .help = "compute threads per worker (0 = the machine's cores divided among the workers, at "
                                   "least 1)",
                           .env = "TESSERA_UP_WORKER_THREADS", .min = 0, .max = 1024});
  o.add(c.scheduler.service.prefix_cache, shared(t.scheduler, "prefix-cache"));
  o.add(c.data_dir, {.name = "data-dir", .help = "where synthesized models are kept (\"\" = $TMPDIR/tessera-up-<uid>)",
                     .env = "TESSERA_UP_DATA_DIR"});
  o.add(c.restart, {.name = "restart",
                    .help = "a child that exits: on-failure = restart it (max-restarts), never = stop the whole "
                            "cluster",
                    .env = "TESSERA_UP_RESTART", .choices = {"on-failure", "never"}});
  o.add(c.max_restarts, {.name = "max-restarts",
                         .help = "restarts per child within restart-window-s before giving up on it (a worker past "
                                 "it is left stopped while other workers run; any other child stops the cluster)",
                         .env = "TESSERA_UP_MAX_RESTARTS", .min = 0, .max = 1000});
  o.add(c.restart_window_s, {.name = "restart-window-s",
                             .help = "the window of the restart budget: only restarts this recent count",
                             .env = "TESSERA_UP_RESTART_WINDOW_S", .min = 1, .max = 86400 * 7});
  o.add(c.curve.dir, {.name = "curve-dir",
                      .help = "CURVE key directory given to every child (tessera keys DIR); \"\" = <data-dir>/keys, "
                              "generated on first start",
                      .env = "TESSERA_UP_CURVE_DIR"});
  o.add(c.curve.insecure, {.name = "insecure",
                           .help = "start every child with --insecure: internal sockets neither authenticated nor "
                                   "encrypted",
                           .env = "TESSERA_UP_INSECURE"});
  o.add(c.ready_timeout_ms, {.name = "ready-timeout-ms", .help = "how long to wait for /ready before giving up",
                             .env = "TESSERA_UP_READY_TIMEOUT_MS", .min = 100, .max = 3600000});
  o.add(c.drain_timeout_s, {.name = "drain-timeout-s",
                            .help = "on Ctrl-C/SIGTERM the frontend, then the workers drain: live requests may run "
                                    "this long (forwarded to both; each gets it plus 10 s before SIGKILL)",
                            .env = "TESSERA_UP_DRAIN_TIMEOUT_S", .min = 0, .max = 86400});
  o.add(c.kvstore_metrics_port, {.name = "kvstore-metrics-port", .help = "kvstore /metrics port (0 = scheduler-port + 4)",
                                 .env = "TESSERA_UP_KVSTORE_METRICS_PORT", .min = 0, .max = 65535});
  o.add(c.worker_metrics_port, {.name = "worker-metrics-port",
                                .help = "/metrics port of worker0; worker i listens on this + i (0 = scheduler-port + 10)",
                                .env = "TESSERA_UP_WORKER_METRICS_PORT", .min = 0, .max = 65535 - 64});
  // K/V offload and CacheBlend: passed on to every worker / the scheduler only when given.
  up::declare_pass_through(o, t.worker, up::kWorkerPassThrough);
  up::declare_pass_through(o, t.scheduler, up::kSchedulerPassThrough);
}

// The arguments `up` passes to one child, each checked against the child's own table (its name
// declared, its value valid) before anything is started.
class ChildArgs {
 public:
  explicit ChildArgs(config::Options& table) : table_(table) {}
  // `--name value`; an error names the child and the option.
  Status set(std::string_view name, const std::string& value) {
    if (Status st = table_.set(name, value, "tessera up"); !st.ok())
      return make_error(ErrorCode::kInvalidArgument, table_.program() + ": " + st.error().message);
    args_.insert(args_.end(), {"--" + std::string(name), value});
    return ok_status();
  }
  // Forwards `up`'s value of each named option the child declares.
  Status forward(const config::Options& up, const std::vector<std::string_view>& names) {
    for (std::string_view n : names)
      if (table_.has(n)) TS_TRY(set(n, up.get(n)));
    return ok_status();
  }
  void set_config(const std::string& file) { args_.insert(args_.end(), {"--config", file}); }
  std::vector<std::string> take() { return std::move(args_); }

 private:
  config::Options& table_;
  std::vector<std::string> args_;
};

struct ChildSpec {
  std::string name;  // "scheduler", "worker", ...
  std::string binary;
  std::vector<std::string> args;
  ChildProcess process;
  bool started = false;  // spawned at least once (a failed spawn counts as an exit)
  bool worker = false;   // one of several interchangeable workers
  std::deque<Clock::time_point> restarts;  // within the restart window
  std::optional<Clock::time_point> restart_at;  // a restart is due then (after the back-off)
  bool given_up = false;  // past its budget and left stopped
};

// Starts (or restarts) `c` in a process group of its own: a terminal's Ctrl-C reaches
// `tessera up` only, which stops the children in order.
void start_child(ChildSpec& c) {
  c.started = true;
  auto p = ChildProcess::spawn({.binary = c.binary, .args = c.args, .new_process_group = true});
  if (!p.ok()) {
    TS_LOG(kError) << "tessera up: " << p.error().message;
    c.process = ChildProcess();
    return;
  }
  c.process = std::move(p).value();
  TS_LOG(kInfo) << "started " << c.name << " (pid " << c.process.pid() << ")";
}

// Runs a command to completion (used for `tessera model synth`).
int run_sync(const std::string& binary, const std::vector<std::string>& args) {
  auto p = ChildProcess::spawn({.binary = binary, .args = args});
  if (!p.ok()) return -1;
  return p->wait().code();
}

void stop_all(std::vector<ChildSpec>& children, int drain_timeout_s) {
  // Reverse dependency order: frontend (drains: refuses new requests, finishes its streams),
  // workers (drain: finish what they hold), kvstore, scheduler. docs/operations.md "Drain".
  for (const char* name : {"frontend", "worker", "kvstore", "scheduler"}) {
    const bool drains = std::string_view(name) == "frontend" || std::string_view(name) == "worker";
    const milliseconds grace = milliseconds(10000) + (drains ? std::chrono::seconds(drain_timeout_s) : milliseconds(0));
    for (auto& c : children) {
      const std::string_view kind = c.worker ? std::string_view("worker") : std::string_view(c.name);
      if (kind != name || !c.process.running()) continue;
      bool killed = false;
      const ExitStatus st = c.process.terminate(grace, &killed);
      if (killed) {
        TS_LOG(kWarn) << c.name << " (pid " << c.process.pid() << ") ignored SIGTERM for " << grace.count() / 1000
                      << " s: SIGKILL";
      }
      TS_LOG(kInfo) << c.name << " (pid " << c.process.pid() << ") stopped: " << st.describe();
    }
  }
}

// tessera_scheduler_live_workers from the scheduler's /metrics; -1 when unreadable.
int live_workers(int metrics_port) {
  auto r = http::request({.port = metrics_port, .method = "GET", .path = "/metrics", .timeout_ms = 1000});
  if (!r.ok() || r->status != 200) return -1;
  auto samples = metrics::parse_text(r->body);
  if (!samples.ok()) return -1;
  for (const auto& s : *samples)
    if (s.name == "tessera_scheduler_live_workers") return static_cast<int>(s.value);
  return -1;
}

// The children to start: each one's arguments derived from `up`'s table and checked against
// the child's own. The options `up` shares with a child are forwarded by name; --config FILE
// goes to every child, which reads its own section.
Result<std::vector<ChildSpec>> plan_children(const config::Options& o, const UpConfig& c, ChildTables& t,
                                             const std::string& model, const std::string& model_name,
                                             const std::string& instance,
                                             const std::function<std::string(const char*)>& bin, bool with_kvstore) {
  const std::string lo = "tcp://127.0.0.1:";
  const int sp = c.scheduler_port;
  const std::string sched_fe = lo + std::to_string(sp), sched_we = lo + std::to_string(sp + 1);
  const std::string kvstore_endpoint = lo + std::to_string(c.kvstore_port);
  auto start = [&](config::Options& table) {
    ChildArgs a(table);
    if (!o.config_file().empty()) a.set_config(o.config_file());
    return a;
  };
  // Every child: the same key directory, or --insecure (resolved by run_up).
  auto secure = [&](ChildArgs& a) { return c.curve.insecure ? a.set("insecure", "true") : a.set("curve-dir", c.curve.dir); };
  // What `up` shares with its children, forwarded to each child that declares it.
  const std::vector<std::string_view> shared = {"log-level",  "log-format", "host",         "http-port",
                                                "num-pages",  "kv-dtype",   "kv-memory-mb", "prefix-cache"};
  std::vector<ChildSpec> children;

  ChildArgs s = start(t.scheduler);
  TS_TRY(s.forward(o, shared));
  TS_TRY(secure(s));
  TS_TRY(s.set("frontend-endpoint", sched_fe));
  TS_TRY(s.set("worker-endpoint", sched_we));
  TS_TRY(s.set("metrics-port", std::to_string(sp + 2)));
  for (const auto& [name, value] : up::given(o, up::kSchedulerPassThrough)) TS_TRY(s.set(name, value));
  children.push_back({.name = "scheduler", .binary = bin("tessera-scheduler"), .args = s.take()});

  if (with_kvstore) {
    ChildArgs k = start(t.kvstore);
    TS_TRY(k.forward(o, shared));
    TS_TRY(secure(k));
    TS_TRY(k.set("listen", kvstore_endpoint));
    TS_TRY(k.set("metrics-port", std::to_string(c.kvstore_metrics_port)));  // resolved by run_up
    children.push_back({.name = "kvstore", .binary = bin("tessera-kvstore"), .args = k.take()});
  }

  int threads = c.worker_threads;
  if (threads == 0 && c.workers > 1)
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / c.workers);
  for (int i = 0; i < c.workers; ++i) {
    ChildArgs w = start(t.worker);
    TS_TRY(w.forward(o, shared));
    TS_TRY(secure(w));
    TS_TRY(w.set("model", model));
    TS_TRY(w.set("scheduler", sched_we));
    TS_TRY(w.set("threads", std::to_string(threads)));
    TS_TRY(w.set("name", "worker" + std::to_string(i)));
    // Only when set: a [worker] placement-rules of the config file applies otherwise.
    if (!c.worker.placement_rules.empty()) TS_TRY(w.set("placement-rules", c.worker.placement_rules));
    TS_TRY(w.set("metrics-port", std::to_string(c.worker_metrics_port + i)));
    TS_TRY(w.set("drain-timeout-s", std::to_string(c.drain_timeout_s)));
    for (const auto& [name, value] : up::given(o, up::kWorkerPassThrough)) TS_TRY(w.set(name, value));
    // dki: the worker fetches and stores preference K/V there (docs/preference.md).
    if (with_kvstore) TS_TRY(w.set("kvstore", kvstore_endpoint));
    children.push_back(
        {.name = "worker" + std::to_string(i), .binary = bin("tessera-worker"), .args = w.take(), .worker = true});
  }

  ChildArgs f = start(t.frontend);
  TS_TRY(f.forward(o, shared));
  TS_TRY(secure(f));
  TS_TRY(f.set("zmq-endpoint", lo + std::to_string(c.zmq_port)));
  TS_TRY(f.set("schedulers", sched_fe));
  TS_TRY(f.set("model", model));
  TS_TRY(f.set("instance-id", instance));
  TS_TRY(f.set("drain-timeout-s", std::to_string(c.drain_timeout_s)));
  if (!c.frontend.tokenizer.empty()) TS_TRY(f.set("tokenizer", c.frontend.tokenizer));
  if (!model_name.empty()) TS_TRY(f.set("model-name", model_name));
  // dki: stored preferences and admin invalidation (docs/api.md "Admin"; token: TESSERA_ADMIN_TOKEN).
  if (with_kvstore) TS_TRY(f.set("kvstore", kvstore_endpoint));
  children.push_back({.name = "frontend", .binary = bin("tessera-frontend"), .args = f.take()});
  return children;
}

int run_up(const std::vector<std::string>& args) {
  log::set_component("up");
  ChildTables tables;
  UpConfig c;
  config::Options o("tessera up", "up");
  declare_up_options(o, c, tables);
  o.describe("Starts a single-machine cluster (scheduler, CPU workers, frontend, kvstore) and supervises it. "
             "The options it shares with its children (model, tokenizer, host, http-port, num-pages, kv-dtype, "
             "kv-memory-mb, prefix-cache, log-level) are theirs, forwarded by name; --config FILE is passed to every child, which reads its own "
             "section ([scheduler], [worker], [frontend], [kvstore])");
  if (auto exit_code = config::parse_command_line(o, args)) return *exit_code;

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

  std::string data_dir = c.data_dir;
  if (data_dir.empty()) data_dir = (fs::temp_directory_path() / ("tessera-up-" + std::to_string(::getuid()))).string();
  if (c.curve.insecure && !c.curve.dir.empty()) {
    std::fprintf(stderr, "tessera up: --insecure and --curve-dir %s contradict each other; give one\n", c.curve.dir.c_str());
    return 2;
  }
  if (!c.curve.insecure && c.curve.dir.empty()) {
    c.curve.dir = data_dir + "/keys";
    if (!curve::key_set_complete(c.curve.dir)) {
      const Status st = curve::generate_key_set(c.curve.dir);
      if (!st.ok()) {
        std::fprintf(stderr, "tessera up: cannot make the cluster's CURVE keys: %s\n", st.error().message.c_str());
        return 1;
      }
      TS_LOG(kInfo) << "generated a CURVE key set in " << c.curve.dir << " (internal sockets authenticated and encrypted)";
    }
  }
  if (c.curve.insecure) {
    TS_LOG(kWarn) << "--insecure: the cluster's internal sockets are neither authenticated nor encrypted";
  }

  std::string model = c.frontend.model;
  std::string model_name;
  // Fail fast on a path that is not there: no child would ever load it (no restarts, no retries).
  for (const auto& [flag, path] : {std::pair<const char*, std::string>{"--model", model}, {"--tokenizer", c.frontend.tokenizer}}) {
    if (!path.empty() && !fs::exists(path, ec)) {
      std::fprintf(stderr, "tessera up: %s %s: no such file or directory\n", flag, path.c_str());
      return 2;
    }
  }
  if (c.kvstore_metrics_port == 0) c.kvstore_metrics_port = c.scheduler_port + 4;
  if (c.worker_metrics_port == 0) c.worker_metrics_port = c.scheduler_port + 10;
  if (model.empty() && c.synth_like.empty()) {
    if (const std::string demo = up::find_demo_model(bin_dir); !demo.empty()) {
      model = demo + "/stories260K.bin";
      c.frontend.tokenizer = demo + "/tok512.bin";
      model_name = "stories260K";
      TS_LOG(kInfo) << "no --model given: serving the stories260K demo model (" << model
                    << "; it writes short children's stories). Serve another with --model PATH";
    }
  }
  if (model.empty()) {
    const std::string& dir = data_dir;
    fs::create_directories(dir, ec);
    const std::string like = c.synth_like.empty() ? "stories260k" : c.synth_like;
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

  const bool with_kvstore = c.kvstore && fs::exists(bin("tessera-kvstore"));
  if (o.get_bool("kv-offload") && !with_kvstore) {
    std::fprintf(stderr, "tessera up: --kv-offload needs the kvstore: --kvstore true and tessera-kvstore next to tessera\n");
    return 2;
  }
  const std::string instance = up::new_instance_id();
  auto planned = plan_children(o, c, tables, model, model_name, instance, bin, with_kvstore);
  if (!planned.ok()) {
    std::fprintf(stderr, "tessera up: %s\n", planned.error().message.c_str());
    return 2;
  }
  std::vector<ChildSpec> children = std::move(*planned);
  const std::string lo = "tcp://127.0.0.1:";
  const int sp = c.scheduler_port;
  const int num_workers = c.workers;
  // Every port a child will bind must be free: another process there would either make a child
  // fail or, worse, answer the readiness probe in its place.
  std::vector<std::pair<std::string, int>> ports = {{"--http-port", c.frontend.http_port},
                                                    {"--zmq-port", c.zmq_port},
                                                    {"--scheduler-port", sp},
                                                    {"--scheduler-port (+1, workers)", sp + 1},
                                                    {"--scheduler-port (+2, metrics)", sp + 2}};
  if (with_kvstore) {
    ports.emplace_back("--kvstore-port", c.kvstore_port);
    ports.emplace_back("--kvstore-metrics-port", c.kvstore_metrics_port);
  }
  for (int i = 0; i < num_workers; ++i)
    ports.emplace_back("--worker-metrics-port (+" + std::to_string(i) + ")", c.worker_metrics_port + i);
  for (const auto& [what, port] : ports) {
    const std::string host = what == "--http-port" ? c.frontend.host : "127.0.0.1";
    if (up::port_taken(host, port)) {
      std::fprintf(stderr,
                   "tessera up: port %d (%s) on %s is already in use by another process: stop it, or choose another "
                   "port\n",
                   port, what.c_str(), host.c_str());
      return 1;
    }
  }

  signals::install();  // no thread of ours runs yet; the children get SIGINT/SIGTERM back (ChildProcess)
  for (auto& child : children) start_child(child);

  const int http_port = c.frontend.http_port;
  const auto ready_deadline = Clock::now() + milliseconds(c.ready_timeout_ms);
  bool ready = false, announced_wait = false;
  const std::string& restart = c.restart;
  const int max_restarts = c.max_restarts;
  int exit_code = 0;
  while (!signals::stop_flag()) {
    // Children that exited on their own (running() reaps them), and restarts that are due.
    bool give_up = false;
    const auto now = Clock::now();
    for (auto& child : children) {
      if (child.given_up) continue;
      if (child.restart_at) {
        if (now < *child.restart_at) continue;
        child.restart_at.reset();
        start_child(child);
        TS_LOG(kWarn) << "restarted " << child.name << " (pid " << child.process.pid() << "), "
                      << child.restarts.size() << " restart(s) in the last " << c.restart_window_s << " s (budget "
                      << max_restarts << ")";
        continue;
      }
      if (!child.started || child.process.running()) continue;
      const auto& st = child.process.status();
      TS_LOG(kError) << child.name << " (pid " << child.process.pid() << ") exited unexpectedly: "
                     << (st ? st->describe() : std::string("it could not be started"));
      while (!child.restarts.empty() && now - child.restarts.front() > std::chrono::seconds(c.restart_window_s))
        child.restarts.pop_front();
      if (restart == "on-failure" && static_cast<int>(child.restarts.size()) < max_restarts) {
        child.restarts.push_back(now);
        child.restart_at = now + milliseconds(1000);  // back-off; the loop keeps supervising the others
        continue;
      }
      child.started = false;  // reported once
      child.given_up = true;
      const bool other_worker = child.worker && std::any_of(children.begin(), children.end(), [](const ChildSpec& other) {
                                  return other.worker && !other.given_up;
                                });
      if (restart == "on-failure" && other_worker) {
        TS_LOG(kError) << child.name << " exited " << max_restarts + 1 << " times within " << c.restart_window_s
                       << " s: left stopped; the other workers keep serving";
      } else {
        give_up = true;
      }
    }
    if (give_up) {
      TS_LOG(kError) << "a child cannot be kept running (--restart " << restart << "): shutting the cluster down";
      exit_code = 1;
      break;
    }
    if (!ready) {
      auto r = http::request({.port = http_port, .method = "GET", .path = "/ready", .timeout_ms = 1000});
      // Only our frontend echoes our instance id; any other answer is a foreign process.
      const bool ours = r.ok() && r->body.find("\"instance\":\"" + instance + "\"") != std::string::npos;
      if (r.ok() && !ours) {
        TS_LOG(kError) << "another process answers on http port " << http_port << " (HTTP " << r->status
                       << ", not our frontend's instance id " << instance
                       << "): stop it or choose another --http-port; not reporting the cluster ready";
        exit_code = 1;
        break;
      }
      if (ours && r->status == 200 && live_workers(sp + 2) >= num_workers) {
        ready = true;
        std::printf("tessera up: cluster ready — http://%s:%d (OpenAI API), zmq %s%lld (msgpack API), scheduler metrics "
                    "http://127.0.0.1:%d/metrics\n  try: curl -s http://127.0.0.1:%d/v1/completions -H 'Content-Type: "
                    "application/json' -d '{\"prompt\": \"Once upon a time\", \"max_tokens\": 32}'\n",
                    c.frontend.host.c_str(), http_port, lo.c_str(), static_cast<long long>(c.zmq_port), sp + 2,
                    http_port);
        if (num_workers > 1) std::printf("tessera up: %d workers registered (worker0 .. worker%d)\n", num_workers, num_workers - 1);
        std::printf("tessera up: worker metrics http://127.0.0.1:%d/metrics%s%s\n", c.worker_metrics_port,
                    num_workers > 1 ? " (+1 per worker)" : "",
                    with_kvstore ? (", kvstore metrics http://127.0.0.1:" + std::to_string(c.kvstore_metrics_port) + "/metrics").c_str() : "");
        std::fflush(stdout);
      } else if (Clock::now() > ready_deadline) {
        TS_LOG(kError) << "the cluster did not become ready within " << c.ready_timeout_ms << " ms";
        exit_code = 1;
        break;
      } else if (!announced_wait) {
        announced_wait = true;
        TS_LOG(kInfo) << "waiting for http://127.0.0.1:" << http_port << "/ready";
      }
    }
    (void)signals::wait_for_stop(milliseconds(200));  // supervision tick, cut short by SIGINT/SIGTERM
  }
  if (signals::stop_flag()) {
    TS_LOG(kInfo) << "signal " << signals::received_signal() << ": stopping the cluster";
  }
  stop_all(children, c.drain_timeout_s);
  return exit_code;
}

}  // namespace

TESSERA_COMMAND("up", "start a single-machine cluster (scheduler, CPU workers, frontend, kvstore) and supervise it", run_up);

}  // namespace tessera::tools
