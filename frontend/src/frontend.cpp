// Frontend: the thin owner that builds the components and wires them together (options: options.cpp).
#include "tessera/frontend/frontend.h"

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <mutex>
#include <thread>

#include "admin.h"
#include "client_api.h"
#include "dashboard.h"
#include "frontend_metrics.h"
#include "http_server.h"
#include "tessera/common/log.h"
#include "tessera/frontend/admission.h"
#include "tessera/frontend/hub.h"
#include "tessera/frontend/openai.h"
#include "tessera/frontend/request_preparer.h"
#include "tessera/frontend/stored_preferences.h"

namespace tessera::frontend {

// ---- The owner ----------------------------------------------------------------------------

// Members in construction order; destroyed in reverse. Every component is whole before any
// thread that can reach it starts: create() builds them all, then starts the hub thread; run()
// starts the I/O threads. The kvstore executor (in `preferences`) posts into `ioc`, so it is
// declared after it (joined first); `ioc`'s pending handlers hold admission slots, so
// `admission` is declared before it.
struct Frontend::Impl {
  FrontendConfig config;
  metrics::Registry registry;
  ApiKeys api_keys;
  std::unique_ptr<FrontendMetrics> metrics;
  std::unique_ptr<RequestPreparer> preparer;
  std::unique_ptr<Admission> admission;
  std::unique_ptr<Hub> hub;
  std::unique_ptr<Dashboard> dashboard;  // before ioc: a stream's coroutine releases its count into it
  boost::asio::io_context ioc;
  std::unique_ptr<StoredPreferences> preferences;
  std::unique_ptr<AdminApi> admin;
  std::unique_ptr<ClientApi> client_api;
  std::unique_ptr<HttpServer> http;
  std::vector<std::thread> threads;  // I/O threads besides the one in run()
  std::atomic<bool> stopped{false};
  std::mutex drain_mu;
  std::thread drainer;  // GUARDED_BY(drain_mu): started by drain(), joined by the destructor
};

Frontend::Frontend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Frontend::~Frontend() {
  stop();
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
  {
    std::lock_guard<std::mutex> lock(impl_->drain_mu);
    if (impl_->drainer.joinable()) impl_->drainer.join();
  }
  // In-flight sinks are failed on the hub thread while everything they reach is still whole.
  if (impl_->hub) impl_->hub->stop();
}

Result<std::unique_ptr<Frontend>> Frontend::create(const FrontendConfig& config) {
  if (config.schedulers.empty()) return make_error(ErrorCode::kInvalidArgument, "--schedulers is empty");
  auto impl = std::make_unique<Impl>();
  Impl& f = *impl;
  f.config = config;
  if (f.config.instance_id.empty()) f.config.instance_id = random_hex_id();
  TS_ASSIGN_OR_RETURN(curve::Keys keys, curve::Keys::load(config.curve, curve::Role::kFrontend));
  if (config.zmq_curve && !keys.secure())
    return make_error(ErrorCode::kInvalidArgument, "--zmq-curve needs --curve-dir (the frontend's key pair and client.key)");
  TS_ASSIGN_OR_RETURN(curve::ClientKeys to_schedulers, keys.client_of(curve::Role::kScheduler));
  curve::ClientKeys to_kvstore;
  if (!config.kvstore.empty()) {
    TS_ASSIGN_OR_RETURN(to_kvstore, keys.client_of(curve::Role::kKvstore));
  }
  TS_ASSIGN_OR_RETURN(f.api_keys, ApiKeys::create(config));
  TS_ASSIGN_OR_RETURN(f.preparer, RequestPreparer::create(config));
  f.metrics = std::make_unique<FrontendMetrics>(f.registry, f.preparer->model_name());
  f.admission = std::make_unique<Admission>(
      AdmissionConfig{.max_concurrent = config.max_concurrent_requests, .max_queued = config.max_queued_requests}, f.metrics->inflight);
  TS_ASSIGN_OR_RETURN(f.hub, Hub::create(HubConfig{.scheduler_endpoints = config.schedulers,
                                                   .scheduler_refresh_ms = config.scheduler_refresh_ms,
                                                   .load_epsilon = config.scheduler_load_epsilon,
                                                   .client_endpoint = config.zmq_endpoint,
                                                   .heartbeat_ms = config.heartbeat_ms,
                                                   .dead_after_ms = config.scheduler_dead_ms,
                                                   .name = "frontend",
                                                   .keys = keys,
                                                   .to_schedulers = to_schedulers,
                                                   .client_curve = config.zmq_curve},
                                         f.registry));
  f.dashboard = std::make_unique<Dashboard>(*f.hub, f.preparer->model_name(), f.metrics->inflight, f.registry,
                                            std::chrono::milliseconds(config.http_write_timeout_ms));
  TS_ASSIGN_OR_RETURN(f.preferences,
                      StoredPreferences::create({.endpoint = config.kvstore, .timeout_ms = config.kvstore_timeout_ms, .curve = to_kvstore},
                                                f.registry));
  f.admin = std::make_unique<AdminApi>(config.admin_token, f.preferences->enabled(), *f.hub, f.registry);
  f.client_api = std::make_unique<ClientApi>(ClientApi::Deps{.ioc = f.ioc, .hub = *f.hub, .preparer = *f.preparer,
                                                             .admission = *f.admission, .preferences = *f.preferences,
                                                             .metrics = *f.metrics, .api_keys = f.api_keys,
                                                             .request_timeout_ms = config.request_timeout_ms});
  const int64_t created_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  TS_ASSIGN_OR_RETURN(f.http, HttpServer::create({.config = f.config, .ioc = f.ioc, .hub = *f.hub, .preparer = *f.preparer,
                                                  .admission = *f.admission, .preferences = *f.preferences, .admin = *f.admin,
                                                  .metrics = *f.metrics, .api_keys = f.api_keys, .dashboard = *f.dashboard,
                                                  .created_unix = created_unix}));
  // Everything is built: only now may the hub thread call into the client API.
  f.hub->start([api = f.client_api.get()](zmqu::Envelope env) { api->on_message(std::move(env)); });
  TS_LOG(kInfo) << "model=" << f.preparer->model_name() << " | chat template " << chat_template_name(f.preparer->chat_template().kind)
                << (f.preparer->chat_template().builtin ? " (built-in)"
                    : f.preparer->chat_template().kind == ChatTemplateKind::kJinja
                        ? " (the model's own, rendered by tessera_jinja)"
                        : " (recognized)")
                << (f.api_keys.enabled() ? " | " + std::to_string(f.api_keys.size()) + " API key(s)" : std::string(" | no API keys (open)"));
  std::unique_ptr<Frontend> fe(new Frontend(std::move(impl)));
  fe->impl_->admin->set_drain([raw = fe.get()] { return raw->drain(); });  // POST /admin/v1/drain
  return fe;
}

int Frontend::http_port() const { return impl_->http->port(); }
std::string Frontend::zmq_endpoint() const { return impl_->hub->client_endpoint(); }

void Frontend::run() {
  impl_->http->start();
  impl_->dashboard->start(impl_->ioc);
  for (int i = 1; i < impl_->config.http_threads; ++i) impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  impl_->ioc.run();
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
}

const std::string& Frontend::instance_id() const { return impl_->config.instance_id; }

bool Frontend::drain() {
  Impl& f = *impl_;
  if (!f.admission->begin_drain()) return false;
  const int timeout_s = f.config.drain_timeout_s;
  TS_LOG(kInfo) << "draining: new requests get 503; " << f.admission->in_flight() << " in flight may run for up to "
                << timeout_s << " s";
  std::lock_guard<std::mutex> lock(f.drain_mu);
  f.drainer = std::thread([this, timeout_s] {
    Impl& d = *impl_;
    using namespace std::chrono;
    auto idle = [&] { return d.admission->in_flight() == 0 && d.admission->active() == 0; };
    // Polls (the counters are atomics shared with every I/O thread); stop() ends the wait early.
    auto wait_idle = [&](steady_clock::time_point until) {
      while (!idle() && !d.stopped.load() && steady_clock::now() < until) std::this_thread::sleep_for(milliseconds(20));
      return idle();
    };
    if (!wait_idle(steady_clock::now() + seconds(timeout_s))) {
      TS_LOG(kWarn) << "drain timeout (" << timeout_s << " s): ending " << d.admission->in_flight()
                    << " requests still running with an error";
      d.admission->expire_drain();
      // Each generation notices within its disconnect check (200 ms) and writes its error event.
      // ZeroMQ client-API requests get theirs from the hub's shutdown.
      if (!wait_idle(steady_clock::now() + seconds(5))) {
        TS_LOG(kWarn) << "drain: " << d.admission->in_flight() << " requests still running at exit";
      }
    }
    TS_LOG(kInfo) << "drained: stopping";
    stop();
  });
  return true;
}

void Frontend::stop() {
  if (impl_->stopped.exchange(true)) return;
  impl_->ioc.stop();
}

}  // namespace tessera::frontend
