// tessera-worker: loads a model, builds the chosen backend (--backend cpu|cuda|auto,
// backend_select.h) with its StepExecutor and serves step plans for one scheduler
// (worker_service.h). Every option is declared once in worker_options.cpp (flag, [worker] config key,
// env var), bound to a WorkerOptions member whose initializer is its default (worker_options.h).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/common/log.h"
#include "tessera/common/signals.h"
#include "backend_select.h"
#include "tessera/model/model.h"
#include "tessera/worker/preference.h"
#include "worker_options.h"
#include "worker_service.h"

namespace {


}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  log::set_component("worker");
  worker_app::WorkerOptions config;
  config::Options options("tessera-worker", "worker");
  worker_app::declare_options(options, config);
  options.describe("Loads a model, builds the chosen backend and executes the step plans of one scheduler");
  if (auto exit_code = config::parse_command_line(options, std::vector<std::string>(argv + 1, argv + argc)))
    return *exit_code;
  if (config.model.empty()) {
    std::fprintf(stderr, "tessera-worker: --model is required (a GGUF file, safetensors directory or llama2.c .bin)\n");
    return 2;
  }
  signals::install();  // before any thread starts (signals.h); run_service stops on stop_flag()

  // CURVE keys first: a key problem is reported before the (slow) model load.
  {
    auto keys = curve::Keys::load(config.curve, curve::Role::kWorker);
    Result<curve::ClientKeys> to_scheduler = keys.ok() ? keys->client_of(curve::Role::kScheduler) : keys.error();
    Result<curve::ClientKeys> to_kvstore = curve::ClientKeys{};
    if (to_scheduler.ok() && !config.kvstore.endpoint.empty()) to_kvstore = keys->client_of(curve::Role::kKvstore);
    if (!to_scheduler.ok() || !to_kvstore.ok()) {
      std::fprintf(stderr, "tessera-worker: %s\n",
                   (to_scheduler.ok() ? to_kvstore.error() : to_scheduler.error()).message.c_str());
      return 2;
    }
    config.service.curve = *to_scheduler;
    config.kvstore.curve = *to_kvstore;
  }

  // The backend is chosen (and its absence reported) before the model is loaded.
  std::string why;
  auto backend_name = worker_app::resolve_backend(config.backend, !config.kvstore.endpoint.empty(), &why);
  if (!backend_name.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", backend_name.error().message.c_str());
    return 1;
  }
  auto model = load_model(config.model);
  if (!model.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", model.error().to_string().c_str());
    return 1;
  }
  worker_app::BackendOptions bo = config.backend_options;
  bo.max_batch_tokens = config.service.max_batch_tokens;
  auto backend = worker_app::create_backend(*backend_name, **model, bo);
  if (!backend.ok()) {
    std::fprintf(stderr, "tessera-worker: --backend %s: %s\n", backend_name->c_str(), backend.error().to_string().c_str());
    return 1;
  }
  worker::StepExecutor& executor = (*backend)->executor();

  // Preference K/V injection (dki): KvFill directives go to the injector (docs/preference.md).
  // Only a backend with kv_fill runs them (resolve_backend refused --kvstore elsewhere); on the
  // others a plan with a KvFill is refused naming the capability.
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
  if (executor.backend().capabilities().kv_fill) injector.attach(executor);

  worker_app::ServiceConfig& sc = config.service;
  if (sc.name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    sc.name = std::string(host) + ":" + std::to_string(getpid());
  }
  const int32_t eos = config.eos_id;
  const bool llama2c = (*model)->format() == ModelFormat::kLlama2c;
  sc.eos_id = eos != -2 ? eos : ((*model)->vocab.eos_id >= 0 ? (*model)->vocab.eos_id : (llama2c ? 2 : -1));

  const worker::PoolGeometry pool = executor.backend().geometry();
  std::printf("READY worker=%s pages=%d page_size=%d backend=%s\n", sc.name.c_str(), pool.num_pages, pool.page_size,
              std::string(executor.backend().name()).c_str());
  std::fflush(stdout);
  std::string caps;
  for (const std::string& c : executor.capabilities()) caps += (caps.empty() ? "" : ",") + c;
  TS_LOG(kInfo) << "worker=" << sc.name << " | model " << config.model << " (" << (*model)->parameter_count()
                << " parameters), " << pool.num_pages << " pages x " << pool.page_size << " tokens; "
                << (*backend)->describe() << " (" << why << "); capabilities " << caps << "; scheduler "
                << sc.scheduler_endpoint;
  if (!executor.backend().capabilities().kv_fill) {
    TS_LOG(kWarn) << "worker=" << sc.name << " | the " << executor.backend().name()
                  << " backend lacks kv_fill: step plans with preference K/V fills are refused (error names the capability)";
  }
  Status st = worker_app::run_service(sc, **model, executor, signals::stop_flag());
  if (!st.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", st.error().to_string().c_str());
    return 1;
  }
  TS_LOG(kInfo) << "worker=" << sc.name << " | exiting";
  return 0;
}
