#include "three_hosts.h"

#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tessera/common/child_process.h"
#include "tessera/common/metrics.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/wait.h"

namespace tessera::testing {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

namespace {

const std::map<std::string, std::string> kIp = {{"a", "10.77.0.1"}, {"b", "10.77.0.2"}, {"c", "10.77.0.3"}};

std::string tail(const std::string& path, size_t bytes = 2500) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

// Which roles each host runs, and so which key files it gets (docs/security.md, "Keys").
std::vector<std::string> roles_of(const std::string& host) {
  if (host == "c") return {"worker"};
  return {"scheduler", "frontend", "kvstore", "worker"};
}

bool tcp_open(const std::string& ip, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &sa.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

ThreeHosts::ThreeHosts() {
  dir_ = make_temp_dir("tessera-multihost");
  fs::create_directories(dir_ + "/logs");
  bed_ = std::make_unique<NetBed>();
  if (!bed_->ok()) {
    ADD_FAILURE() << "network bed: " << bed_->error();
    return;
  }
  bed_->add_host("a", 1);
  bed_->add_host("b", 2);
  bed_->add_host("c", 3);
  bed_->add_host("client", 100);
  if (!bed_->ok() || !distribute_keys()) return;
  for (const std::string h : {"a", "b", "c"})
    fs::copy_file(source_path("deploy/bare/host-" + h + ".conf"), host_dir(h) + "/tessera.conf");

  for (const std::string& name : names()) {
    if (!start(name)) {
      ADD_FAILURE() << name << " did not start\n" << logs();
      return;
    }
  }
  if (!settled(milliseconds(20000))) {
    ADD_FAILURE() << "the cluster did not settle (2 workers per scheduler, both frontends ready) within 20 s\n"
                  << logs();
    return;
  }
  ok_ = true;
}

ThreeHosts::~ThreeHosts() {
  // Orderly stop (SIGTERM) in reverse start order; the bed SIGKILLs what is left.
  for (const std::string name : {"frontend-a", "frontend-b", "w1", "w2", "w3", "w4", "sched-a", "sched-b",
                                 "kvstore-a", "kvstore-b", "redis-b", "redis-c"}) {
    auto it = processes_.find(name);
    if (it != processes_.end()) it->second->signal(SIGCONT), it->second->signal(SIGTERM);
  }
  for (auto& [name, p] : processes_) (void)p->wait_exit(milliseconds(3000));
  bed_.reset();
}

bool ThreeHosts::distribute_keys() {
  admin_keys_ = dir_ + "/admin/keys";
  auto run = [&](std::vector<std::string> args) {
    auto r = run_to_exit({.binary = bin_path("tessera"), .args = args, .stdout_to = ChildOutput::pipe(),
                          .stderr_to = ChildOutput::same_as_stdout()});
    if (!r.ok() || r->first.shell_code() != 0) {
      ADD_FAILURE() << "tessera " << args.at(0) << " failed: " << (r.ok() ? r->second : r.error().to_string());
      return false;
    }
    return true;
  };
  if (!run({"keys", admin_keys_})) return false;
  for (const std::string h : {"a", "b", "c"})
    if (!run({"keys", admin_keys_, "--role", "worker", "--name", "host-" + h})) return false;
  // Each host: only the files its roles need (docs/security.md, "Keys: layout, generation,
  // distribution"); its worker.key_secret is its own host key.
  for (const std::string h : {"a", "b", "c"}) {
    const std::string keys = host_dir(h) + "/keys";
    fs::create_directories(keys);
    fs::permissions(keys, fs::perms::owner_all);
    auto copy = [&](const std::string& from, const std::string& to) {
      fs::copy_file(admin_keys_ + "/" + from, keys + "/" + to, fs::copy_options::overwrite_existing);
    };
    for (const auto& role : roles_of(h)) {
      if (role == "scheduler" || role == "kvstore") {
        copy(role + ".key_secret", role + ".key_secret");
        copy("frontend.key", "frontend.key");
        copy("worker.key", "worker.key");
        fs::create_directories(keys + "/worker.d");
        for (const auto& e : fs::directory_iterator(admin_keys_ + "/worker.d"))
          if (e.path().extension() == ".key") copy("worker.d/" + e.path().filename().string(), "worker.d/" + e.path().filename().string());
      } else if (role == "frontend") {
        copy("frontend.key_secret", "frontend.key_secret");
        copy("scheduler.key", "scheduler.key");
        copy("kvstore.key", "kvstore.key");
      } else if (role == "worker") {
        copy("worker.d/host-" + h + ".key_secret", "worker.key_secret");
        copy("scheduler.key", "scheduler.key");
        copy("kvstore.key", "kvstore.key");
      }
    }
  }
  return true;
}

std::string ThreeHosts::host_of(const std::string& name) {
  if (name == "w3" || name == "w4") return "c";
  if (name == "w1") return "a";
  if (name == "w2") return "b";
  return name.substr(name.size() - 1);  // sched-a, frontend-b, kvstore-a, redis-c
}

std::pair<std::string, int> ThreeHosts::worker_metrics(const std::string& worker) {
  return {kIp.at(host_of(worker)), worker == "w4" ? 8111 : 8110};
}

std::vector<std::string> ThreeHosts::command_for(const std::string& name) const {
  const std::string h = host_of(name);
  const std::string conf = host_dir(h) + "/tessera.conf";
  const std::string keys = host_dir(h) + "/keys";
  const std::string model = shared_path("models/stories260K/stories260K.bin");
  const std::string tok = shared_path("models/stories260K/tok512.bin");
  if (name.rfind("redis-", 0) == 0)
    return {"redis-server", "--bind", kIp.at(h), "--port", "6379", "--protected-mode", "no", "--save", "",
            "--appendonly", "no"};
  if (name.rfind("kvstore-", 0) == 0)
    return {"env", "TESSERA_KVSTORE_SECRET=" + std::string(kKvstoreSecret), bin_path("tessera-kvstore"), "--config", conf,
            "--curve-dir", keys};
  if (name.rfind("sched-", 0) == 0) return {bin_path("tessera-scheduler"), "--config", conf, "--curve-dir", keys};
  if (name.rfind("frontend-", 0) == 0)
    return {bin_path("tessera-frontend"), "--config", conf, "--curve-dir", keys, "--model", model, "--tokenizer", tok};
  // Workers.
  std::vector<std::string> cmd = {bin_path("tessera-worker"), "--config", conf, "--curve-dir", keys, "--name", name,
                                  "--model", model, "--backend", "cpu"};
  // host-c's workers list both schedulers, each its own first (the config's scheduler-order = listed).
  if (name == "w3")
    cmd.insert(cmd.end(), {"--scheduler", "tcp://10.77.0.1:8101,tcp://10.77.0.2:8101", "--metrics-port", "8110"});
  if (name == "w4")
    cmd.insert(cmd.end(), {"--scheduler", "tcp://10.77.0.2:8101,tcp://10.77.0.1:8101", "--metrics-port", "8111"});
  return cmd;
}

std::vector<std::string> ThreeHosts::test_flags(const std::string& name) {
  if (name.rfind("sched-", 0) == 0) return {"--heartbeat-ms", "100", "--worker-dead-ms", "1000", "--frontend-dead-ms", "2000"};
  if (name.rfind("frontend-", 0) == 0)
    return {"--heartbeat-ms", "100", "--scheduler-dead-ms", "1000", "--admin-token", kAdminToken};
  if (name.size() == 2 && name[0] == 'w')
    // --min-step-ms (docs/operations.md "Pacing"): 160-200 tokens last >= 1.6-2 s, so the
    // tests' "all in flight at once" states hold while they act on them, whatever the load.
    return {"--threads", "1", "--num-pages", "256", "--heartbeat-ms", "100", "--scheduler-dead-ms", "1000",
            "--min-step-ms", "10"};
  return {};
}

bool ThreeHosts::start(const std::string& name) {
  NetHost& h = bed_->host(host_of(name));
  if (auto it = processes_.find(name); it != processes_.end()) {
    h.forget(*it->second);
    processes_.erase(it);
  }
  std::vector<std::string> cmd = command_for(name);
  commands_[name] = cmd;
  for (auto& f : test_flags(name)) cmd.push_back(f);
  // A restarted process logs to <name>-2.log, -3, ... (the first log is kept).
  const int run = ++starts_[name];
  const std::string log = dir_ + "/logs/" + name + (run > 1 ? "-" + std::to_string(run) : "") + ".log";
  std::string binary = cmd.front();
  if (name.rfind("redis-", 0) == 0) {
    const char* env = std::getenv("TESSERA_REDIS_SERVER");
    binary = env && *env ? env : "redis-server";
  }
  if (binary == "env") binary = "/usr/bin/env";
  Process& p = h.spawn(binary, std::vector<std::string>(cmd.begin() + 1, cmd.end()), log);
  processes_[name] = &p;
  const milliseconds deadline(15000);
  if (name.rfind("redis-", 0) == 0)
    return bed_->host("client").run([&] { return wait_until([&] { return tcp_open(h.ip(), 6379); }, deadline); });
  if (name.rfind("kvstore-", 0) == 0) return !p.wait_line("tessera-kvstore listening", deadline).empty();
  if (name.rfind("w", 0) == 0) return !p.wait_line("READY", deadline).empty();
  return !p.wait_line("LISTENING", deadline).empty();
}

void ThreeHosts::kill(const std::string& name) {
  Process& p = process(name);
  p.signal(SIGKILL);
  (void)p.wait_exit(milliseconds(5000));
}

void ThreeHosts::repair() {
  for (NetHost* h : bed_->hosts()) {
    (void)h->link_up();
    (void)h->clear_netem();
  }
  std::vector<std::string> dead;
  for (auto& [name, p] : processes_) {
    p->signal(SIGCONT);
    if (!p->alive()) dead.push_back(name);
  }
  for (const auto& name : dead) (void)start(name);
  // A worker that moved to the other scheduler stays there (docs/architecture.md): restarted, it
  // registers with its own again (tried again when a just-restored link made it move once more).
  for (int attempt = 0; attempt < 3; ++attempt) {
    bool restarted = false;
    for (const std::string w : {"w1", "w2", "w3", "w4"}) {
      if (attempt == 0 && std::find(dead.begin(), dead.end(), w) != dead.end()) continue;
      const auto [ip, port] = worker_metrics(w);
      const double switches = metric(ip, port, "tessera_worker_scheduler_switches_total");
      if (switches != 0.0) {  // moved, or unreadable (NaN)
        kill(w);
        (void)start(w);
        restarted = true;
      }
    }
    if (!restarted) break;
    if (wait_until([&] { return live_workers("a") == 2.0 && live_workers("b") == 2.0; }, milliseconds(5000), milliseconds(50)))
      break;
  }
}

Result<http::Response> ThreeHosts::request(http::Request r) const {
  return bed_->host("client").run([&] { return http::request(r); });
}

Result<http::Response> ThreeHosts::post(const std::string& ip, const std::string& path, const std::string& json,
                                        int timeout_ms) const {
  return request({.host = ip, .port = kHttpPort, .method = "POST", .path = path, .body = json, .timeout_ms = timeout_ms});
}

Result<http::Response> ThreeHosts::get(const std::string& ip, int port, const std::string& path, int timeout_ms) const {
  return request({.host = ip, .port = port, .method = "GET", .path = path, .timeout_ms = timeout_ms});
}

double ThreeHosts::metric(const std::string& ip, int port, const std::string& name, const std::string& filter) const {
  auto r = get(ip, port, "/metrics", 2000);
  if (!r.ok() || r->status != 200) return std::nan("");
  auto samples = metrics::parse_text(r->body);
  if (!samples.ok()) return std::nan("");
  double sum = 0.0;
  bool found = false;
  for (const auto& s : *samples) {
    if (s.name != name || s.labels.find(filter) == std::string::npos) continue;
    sum += s.value;
    found = true;
  }
  return found ? sum : std::nan("");
}

double ThreeHosts::live_workers(const std::string& sched_host) const {
  return metric(kIp.at(sched_host), kSchedulerMetricsPort, "tessera_scheduler_live_workers");
}

bool ThreeHosts::settled(milliseconds timeout) {
  return wait_until(
      [&] {
        if (live_workers("a") != 2.0 || live_workers("b") != 2.0) return false;
        for (const std::string h : {"a", "b"})  // every Redis shard answers (after an outage: its backoff)
          if (metric(kIp.at(h), kKvstoreMetricsPort, "tessera_kvstore_redis_up") != 1.0) return false;
        for (const std::string h : {"a", "b"}) {
          auto r = get(kIp.at(h), kHttpPort, "/ready", 1000);
          if (!r.ok() || r->status != 200) return false;
        }
        return true;
      },
      timeout, milliseconds(50));
}

std::string ThreeHosts::state() const {
  std::string out = "sched-a live workers " + std::to_string(live_workers("a")) + ", sched-b " +
                    std::to_string(live_workers("b"));
  for (const std::string h : {"a", "b"}) {
    out += "; kvstore-" + h + " redis_up " + std::to_string(metric(kIp.at(h), kKvstoreMetricsPort, "tessera_kvstore_redis_up"));
    auto r = get(kIp.at(h), kHttpPort, "/ready", 1000);
    out += ", frontend-" + h + " /ready " + (r.ok() ? std::to_string(r->status) : r.error().to_string());
  }
  for (const std::string w : {"w1", "w2", "w3", "w4"}) {
    const auto [ip, port] = worker_metrics(w);
    out += "; " + w + " switches " + std::to_string(metric(ip, port, "tessera_worker_scheduler_switches_total"));
  }
  return out;
}

std::string ThreeHosts::logs() const {
  std::string out = "state: " + state() + "\n";
  for (const auto& [name, p] : processes_) out += "---- " + name + ".log (tail)\n" + tail(p->log_path()) + "\n";
  return out;
}

}  // namespace tessera::testing
