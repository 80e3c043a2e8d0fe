#include "up_cluster.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tessera/common/metrics.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/up_start.h"
#include "tessera/testing/wait.h"

namespace tessera::testing {
namespace {

using std::chrono::milliseconds;

std::string tail(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  return s.size() > 3000 ? s.substr(s.size() - 3000) : s;
}

}  // namespace

UpCluster::UpCluster(bool second_frontend, bool kvstore) {
  dir_ = make_temp_dir("tessera-cppclient");
  const std::string model = shared_path("models/stories260K/stories260K.bin");
  const std::string tok = shared_path("models/stories260K/tok512.bin");
  // The ports: base .. base+13, free, below the ephemeral range (ports.h, drawn by start_up in
  // up_start.h, again on a fresh block should a port be taken before up binds it): tessera up
  // with --scheduler-port base+2 also takes the kvstore metrics port (scheduler-port + 4) and the
  // worker's metrics port (scheduler-port + 10) — a 6-port probe let a concurrent test's port
  // collide with the worker's metrics port in a rehearsal.
  UpStart started = start_up(
      [&](int base) {
        return std::vector<std::string>{"up", "--model", model, "--tokenizer", tok, "--http-port", std::to_string(base),
                                        "--zmq-port", std::to_string(base + 1), "--scheduler-port", std::to_string(base + 2),
                                        "--kvstore", kvstore ? "true" : "false", "--kvstore-port", std::to_string(base + 5),
                                        "--data-dir", dir_, "--worker-threads", "1", "--num-pages", "512", "--restart", "never"};
      },
      dir_ + "/up.log", milliseconds(60000));
  base_ = started.base;
  up_ = std::move(started.up);
  if (base_ < 0) {
    ADD_FAILURE() << "no free block of 14 loopback ports";
    return;
  }
  if (started.ready.empty()) {
    ADD_FAILURE() << "tessera up never became ready\n" << logs();
    return;
  }
  if (second_frontend) {
    second_ = std::make_unique<Process>(
        bin_path("tessera-frontend"),
        std::vector<std::string>{"--http-port", "0", "--zmq-endpoint", "tcp://127.0.0.1:*", "--schedulers",
                                 "tcp://127.0.0.1:" + std::to_string(base_ + 2), "--model", model, "--tokenizer", tok,
                                 // the key set `tessera up` made in its data dir (docs/security.md)
                                 "--curve-dir", dir_ + "/keys"},
        dir_ + "/frontend2.log");
    const std::string line = second_->wait_line("LISTENING", milliseconds(15000));
    second_zmq_ = line_field(line, "zmq");
    const int http2 = std::atoi(line_field(line, "http").c_str());
    const bool ready = !second_zmq_.empty() && wait_until([&] {
      auto r = http::request({.port = http2, .method = "GET", .path = "/ready", .timeout_ms = 2000});
      return r.ok() && r->status == 200;
    }, milliseconds(15000));
    if (!ready) {
      ADD_FAILURE() << "the second tessera-frontend did not become ready\n" << logs();
      return;
    }
  }
  ok_ = true;
}

UpCluster::~UpCluster() {
  if (second_) second_->terminate(milliseconds(5000));
  if (up_) up_->terminate(milliseconds(15000));  // it stops its children in order
}

double UpCluster::metric(const std::string& name, const std::string& filter) const {
  auto r = http::request({.port = base_ + 4, .method = "GET", .path = "/metrics", .timeout_ms = 5000});
  if (!r.ok() || r->status != 200) return -1.0;
  auto samples = metrics::parse_text(r->body);
  if (!samples.ok()) return -1.0;
  double sum = 0.0;
  for (const auto& s : *samples)
    if (s.name == name && s.labels.find(filter) != std::string::npos) sum += s.value;
  return sum;
}

Result<http::Response> UpCluster::http_post(const std::string& path, const std::string& json) const {
  return http::request({.port = base_, .method = "POST", .path = path, .body = json, .timeout_ms = 30000});
}

std::string UpCluster::logs() const {
  std::string out;
  for (const char* name : {"up.log", "frontend2.log"}) out += std::string("---- ") + name + "\n" + tail(dir_ + "/" + name);
  return out;
}

}  // namespace tessera::testing
