// tessera-worker: loads a model, builds the paged Engine and serves step plans for one scheduler
// (worker_service.h). Every option is declared once in worker_options.cpp (flag, [worker] config key,
// env var), bound to a WorkerOptions member whose initializer is its default (worker_options.h).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/common/log.h"
#include "tessera/worker/engine.h"
#include "tessera/model/model.h"
#include "tessera/worker/preference.h"
#include "worker_options.h"
#include "worker_service.h"

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  log::set_component("worker");
  worker_app::WorkerOptions config;
  config::Options options("tessera-worker", "worker");
  worker_app::declare_options(options, config);
  options.describe("Loads a model, builds the paged engine and executes the step plans of one scheduler");
  if (auto exit_code = config::parse_command_line(options, std::vector<std::string>(argv + 1, argv + argc)))
    return *exit_code;
  if (config.model.empty()) {
    std::fprintf(stderr, "tessera-worker: --model is required (a GGUF file, safetensors directory or llama2.c .bin)\n");
    return 2;
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);

  auto model = load_model(config.model);
  if (!model.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", model.error().to_string().c_str());
    return 1;
  }
  const worker::EngineOptions& eo = config.engine;
  auto engine = worker::Engine::create(**model, eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", engine.error().to_string().c_str());
    return 1;
  }

  // Preference K/V injection (dki): KvFill directives go to the injector (docs/preference.md).
  std::unique_ptr<worker::PreferenceStore> pref_store;
  if (!config.kvstore.endpoint.empty()) {
    auto ps = worker::connect_kvstore(config.kvstore);
    if (!ps.ok()) {
      std::fprintf(stderr, "tessera-worker: --kvstore: %s\n", ps.error().to_string().c_str());
      return 1;
    }
    pref_store = std::move(ps).value();
  }
  worker::PreferenceInjector injector(pref_store.get(), config.injector);
  injector.attach(**engine);

  worker_app::ServiceConfig& sc = config.service;
  if (sc.name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    sc.name = std::string(host) + ":" + std::to_string(getpid());
  }
  const int32_t eos = config.eos_id;
  const bool llama2c = (*model)->format() == ModelFormat::kLlama2c;
  sc.eos_id = eos != -2 ? eos : ((*model)->vocab.eos_id >= 0 ? (*model)->vocab.eos_id : (llama2c ? 2 : -1));

  std::printf("READY worker=%s pages=%d page_size=%d\n", sc.name.c_str(), eo.pool.num_pages, eo.pool.page_size);
  std::fflush(stdout);
  TS_LOG(kInfo) << "worker=" << sc.name << " | model " << config.model << " (" << (*model)->parameter_count()
                << " parameters), " << eo.pool.num_pages << " pages x " << eo.pool.page_size << " tokens, "
                << (*engine)->threads() << " threads; scheduler " << sc.scheduler_endpoint;
  Status st = worker_app::run_service(sc, **model, **engine, g_stop);
  if (!st.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", st.error().to_string().c_str());
    return 1;
  }
  TS_LOG(kInfo) << "worker=" << sc.name << " | exiting";
  return 0;
}
