#include "tessera/testing/cluster.h"

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/common/metrics.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/paths.h"

namespace tessera::testing {

namespace {
std::string tail(const std::string& path, size_t bytes = 3000) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}
}  // namespace

std::vector<GreedyCase> greedy_cases() {
  std::ifstream in(shared_path("models/stories260K/greedy.json"));
  auto j = nlohmann::json::parse(in);
  std::vector<GreedyCase> out;
  for (const auto& c : j.at("cases"))
    out.push_back({c.at("prompt").get<std::string>(), c.at("steps").get<int>(), c.at("completion").get<std::string>()});
  return out;
}

bool Cluster::start_scheduler(const std::string& frontend_endpoint, const std::string& worker_endpoint) {
  const ClusterOptions& o = options_;
  std::vector<std::string> sargs = {"--frontend-endpoint", frontend_endpoint, "--worker-endpoint", worker_endpoint,
                                    "--metrics-port", "0", "--heartbeat-ms", "100",
                                    "--worker-dead-ms", std::to_string(o.worker_dead_ms), "--audit", "true",
                                    "--prefix-cache", o.prefix_cache ? "true" : "false"};
  sargs.insert(sargs.end(), o.scheduler_args.begin(), o.scheduler_args.end());
  // A restarted scheduler appends to the same log.
  const bool first = scheduler_ == nullptr;
  scheduler_.reset();
  scheduler_ = std::make_unique<Process>(bin_path("tessera-scheduler"), with_keys(sargs),
                                       dir_ + (first ? "/scheduler.log" : "/scheduler-restarted.log"));
  const std::string sline = scheduler_->wait_line("LISTENING", milliseconds(10000));
  if (sline.empty()) return false;
  sched_line_ = sline;
  sched_fe_ = line_field(sline, "frontends");
  sched_we_ = line_field(sline, "workers");
  metrics_port_ = std::atoi(line_field(sline, "metrics").c_str());
  return true;
}

bool Cluster::restart_scheduler() {
  scheduler_->signal(SIGKILL);
  (void)scheduler_->wait_exit(milliseconds(5000));
  return start_scheduler(sched_fe_, sched_we_);
}

Cluster::Cluster(const ClusterOptions& o) : options_(o) {
    dir_ = make_temp_dir("tessera-cluster");
  const std::string model = shared_path("models/stories260K/stories260K.bin");
  const std::string tok = shared_path("models/stories260K/tok512.bin");
  if (!start_scheduler("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")) {
    ADD_FAILURE() << "tessera-scheduler did not start\n" << logs();
    return;
  }
  for (int i = 0; i < o.num_workers; ++i) {
    const std::string name = "w" + std::to_string(i);
    // --backend cpu: the expected outputs (greedy.json) are the CPU oracle's, GPU or not.
    std::vector<std::string> wargs = {"--model", model, "--scheduler", sched_we_, "--threads", "1", "--num-pages",
                                      std::to_string(o.num_pages), "--name", name, "--backend", "cpu"};
    if (o.worker_min_step_ms > 0) {
      wargs.push_back("--min-step-ms");
      wargs.push_back(std::to_string(o.worker_min_step_ms));
    }
    wargs.insert(wargs.end(), o.worker_args.begin(), o.worker_args.end());
    workers_.push_back(std::make_unique<Process>(
        bin_path("tessera-worker"), with_keys(wargs),
        dir_ + "/" + (i == 0 ? std::string("worker") : "worker" + std::to_string(i)) + ".log"));
  }
  std::vector<std::string> fargs{"--http-port", "0", "--zmq-endpoint", "tcp://127.0.0.1:*", "--schedulers", sched_fe_,
                                 "--model", model, "--tokenizer", tok, "--heartbeat-ms", "100", "--scheduler-dead-ms",
                                 std::to_string(o.frontend_scheduler_dead_ms), "--max-prompt-tokens", std::to_string(o.max_prompt_tokens)};
  fargs.insert(fargs.end(), o.frontend_args.begin(), o.frontend_args.end());
  frontend_ = std::make_unique<Process>(bin_path("tessera-frontend"), with_keys(fargs), dir_ + "/frontend.log");
  const std::string fline = frontend_->wait_line("LISTENING", milliseconds(15000));
  if (fline.empty()) {
    ADD_FAILURE() << "tessera-frontend did not start\n" << logs();
    return;
  }
  http_port_ = std::atoi(line_field(fline, "http").c_str());
  zmq_endpoint_ = line_field(fline, "zmq");
  const bool ready = wait_until(
      [&] {
        auto r = get("/ready", 0, 2000);
        return r.ok() && r->status == 200 &&
               metric(metrics_port_, "tessera_scheduler_live_workers") == static_cast<double>(o.num_workers);
      },
      milliseconds(15000));
  if (!ready) {
    ADD_FAILURE() << "/ready did not turn 200 within 15 s\n" << logs();
    return;
  }
  ok_ = true;
}

Cluster::~Cluster() {
  // Orderly shutdown first (exercises SIGTERM handling); the Process destructors SIGKILL leftovers.
  std::vector<Process*> all = {frontend_.get()};
  for (auto& w : workers_) all.push_back(w.get());
  all.push_back(scheduler_.get());
  for (Process* c : all)
    if (c) c->signal(SIGTERM);
  for (Process* c : all)
    if (c) (void)c->wait_exit(milliseconds(5000));
}

std::string Cluster::logs() const {
  std::string out;
  std::vector<std::string> names = {"scheduler", "scheduler-restarted", "frontend", "worker"};
  for (size_t i = 1; i < workers_.size(); ++i) names.push_back("worker" + std::to_string(i));
  for (const auto& name : names) {
    const std::string path = dir_ + "/" + name + ".log";
    if (::access(path.c_str(), F_OK) != 0) continue;
    out += "---- " + name + ".log (tail)\n" + tail(path) + "\n";
  }
  return out;
}

Result<http::Response> Cluster::post(const std::string& path, const std::string& json, int timeout_ms) const {
  return http::request({.port = http_port_, .method = "POST", .path = path, .body = json, .timeout_ms = timeout_ms});
}

Result<http::Response> Cluster::get(const std::string& path, int port, int timeout_ms) const {
  return http::request({.port = port ? port : http_port_, .method = "GET", .path = path, .timeout_ms = timeout_ms});
}

double Cluster::metric(int port, const std::string& name, const std::string& label_filter) const {
  auto r = get("/metrics", port);
  if (!r.ok() || r->status != 200) return std::nan("");
  auto samples = metrics::parse_text(r->body);
  if (!samples.ok()) return std::nan("");
  double sum = 0.0;
  bool found = false;
  for (const auto& s : *samples) {
    if (s.name != name || s.labels.find(label_filter) == std::string::npos) continue;
    sum += s.value;
    found = true;
  }
  return found ? sum : std::nan("");
}

}  // namespace tessera::testing
