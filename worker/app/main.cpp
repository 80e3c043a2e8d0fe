// tessera-worker: loads a model, builds the chosen backend (--backend cpu|cuda|auto,
// backend_select.h) with its StepExecutor and serves step plans for one scheduler
// (worker_service.h). Every option is declared once in worker_options.cpp (flag, [worker] config key,
// env var), bound to a WorkerOptions member whose initializer is its default (worker_options.h).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/common/log.h"
#include "tessera/common/metrics_http.h"
#include "tessera/common/signals.h"
#include "tessera/grammar/grammar.h"
#include "tessera/kernels/isa.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tessera/worker/step_executor.h"
#include "backend_select.h"
#include "tessera/placement/placement.h"
#include "tessera/model/model.h"
#include "tessera/worker/preference.h"
#include "tessera/worker/sim_backend.h"
#include "worker_options.h"
#include "offload_metrics.h"
#include "worker_metrics.h"
#include "worker_service.h"

namespace {


// Structured output needs every token's bytes: from the vocabulary the model file embeds
// (GGUF), else from --tokenizer. Without either (a llama2.c checkpoint alone) the worker serves
// no grammar requests (capability "grammar" is not advertised; the scheduler refuses them
// naming it).
// A --tokenizer that does not load is an error (the caller exits).
tessera::Status enable_structured_output(const tessera::Model& model, const std::string& tokenizer_path,
                                         tessera::worker::StepExecutor& executor) {
  if (model.vocab.tokens.empty() && tokenizer_path.empty()) {
    TS_LOG(kInfo) << "the model file embeds no vocabulary and no --tokenizer was given: structured output "
                     "(response_format) is not available";
    return tessera::ok_status();
  }
  auto tok = model.vocab.tokens.empty() ? tessera::load_tokenizer(tokenizer_path) : tessera::tokenizer_from_vocab(model.vocab);
  if (!tok.ok()) {
    if (model.vocab.tokens.empty()) return tessera::make_error(tok.error().code, "--tokenizer: " + tok.error().message);
    TS_LOG(kWarn) << "structured output disabled: the model's vocabulary: " << tok.error().message;
    return tessera::ok_status();
  }
  std::vector<std::string> bytes(static_cast<size_t>(model.config().vocab_size));
  for (size_t id = 0; id < bytes.size(); ++id) {
    const auto t = static_cast<int32_t>(id);
    if (!(*tok)->is_control(t)) bytes[id] = (*tok)->token_bytes(t);
  }
  executor.set_grammar_vocabulary(std::make_shared<const tessera::grammar::TokenVocabulary>(bytes));
  return tessera::ok_status();
}

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
  if (Status isa = kernels::check_isa_env(); !isa.ok()) {  // the kernels' environment, before anything slow
    std::fprintf(stderr, "tessera-worker: %s\n", isa.error().message.c_str());
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
  // auto never picks cuda for a pool only the cpu backend has (docs/kv.md): int8 pages or a memory budget.
  const worker::PoolConfig& pool_config = config.backend_options.pool;
  const bool cpu_pool = pool_config.dtype == kernels::KvDtype::kInt8 || pool_config.memory_mb > 0;
  auto backend_name = config.backend == "auto" && cpu_pool
                          ? Result<std::string>(std::string("cpu"))
                          : worker_app::resolve_backend(config.backend, !config.kvstore.endpoint.empty(), &why);
  if (config.backend == "auto" && cpu_pool) why = "auto: --kv-dtype int8 / --kv-memory-mb need the cpu backend";
  if (!backend_name.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", backend_name.error().message.c_str());
    return 1;
  }
  LoadOptions load_options;
  std::vector<placement::Decision> placed;
  if (!config.placement_rules.empty()) {
    auto rules = placement::load_rules_file(config.placement_rules);
    if (!rules.ok()) {
      std::fprintf(stderr, "tessera-worker: --placement-rules: %s\n", rules.error().message.c_str());
      return 2;
    }
    load_options.placer = placement::make_placer(std::make_shared<const placement::RuleSet>(std::move(*rules)),
                                                 {.backend = *backend_name, .why = why}, &placed);
  }
  auto model = load_model(config.model, load_options);
  if (!model.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", model.error().to_string().c_str());
    return 1;
  }
  worker_app::BackendOptions bo = config.backend_options;
  bo.max_batch_tokens = config.service.max_batch_tokens;
  const int32_t eos = config.eos_id;
  const bool llama2c = (*model)->format() == ModelFormat::kLlama2c;
  const int32_t eos_id = eos != -2 ? eos : ((*model)->vocab.eos_id >= 0 ? (*model)->vocab.eos_id : (llama2c ? 2 : -1));
  if (*backend_name == "sim") {
    bo.eos = eos_id;
    // Its answers are not the model's: a scheduler must not mix it with real workers.
    (*model)->fingerprint = worker::sim_fingerprint((*model)->fingerprint);
  }
  auto backend = worker_app::create_backend(*backend_name, **model, bo);
  if (!backend.ok()) {
    std::fprintf(stderr, "tessera-worker: --backend %s: %s\n", backend_name->c_str(), backend.error().to_string().c_str());
    return 1;
  }
  worker::StepExecutor& executor = (*backend)->executor();
  if (Status gs = enable_structured_output(**model, config.tokenizer, executor); !gs.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", gs.error().to_string().c_str());
    return 1;
  }

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

  // K/V offload (docs/kv.md): spills and reloads of radix pages through the same kvstore.
  std::unique_ptr<worker::KvOffloader> offloader;
  if (config.kv_offload) {
    auto codec = kvstore::parse_codec(config.kv_offload_codec);
    if (!codec.ok()) {
      std::fprintf(stderr, "tessera-worker: --kv-offload-codec: %s\n", codec.error().to_string().c_str());
      return 1;
    }
    if (pref_store == nullptr || !executor.backend().capabilities().kv_pages) {
      std::fprintf(stderr, "tessera-worker: --kv-offload needs --kvstore and a backend that reads and writes K/V pages "
                           "(cpu); the %s backend%s\n",
                   std::string(executor.backend().name()).c_str(),
                   pref_store == nullptr ? " has no --kvstore" : " cannot read or write K/V pages");
      return 1;
    }
    worker::OffloadOptions oo;
    oo.codec = config.injector.codec;  // group size, kivi/tiered steps: the --kv-codec-* settings
    oo.codec.codec = *codec;
    oo.blob_dtype = config.kv_offload_dtype == "f32" ? DType::kF32 : DType::kF16;
    oo.pool_dtype = (*backend)->kv_dtype().empty() ? "f32" : (*backend)->kv_dtype();
    oo.max_pending_bytes = static_cast<size_t>(config.kv_offload_max_pending_mb) << 20;
    offloader = std::make_unique<worker::KvOffloader>(pref_store.get(), oo);
    executor.set_offload_handler(offloader.get());
  }

  worker_app::ServiceConfig& sc = config.service;
  if (sc.name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    sc.name = std::string(host) + ":" + std::to_string(getpid());
  }
  sc.eos_id = eos_id;

  const worker::PoolGeometry pool = executor.backend().geometry();
  // /metrics, /health, /ready (worker_metrics.h); every series exists before the first step.
  metrics::Registry registry;
  worker_app::WorkerMetrics wm(registry, {.worker = sc.name,
                                          .model = std::filesystem::path(config.model).filename().string(),
                                          .backend = std::string(executor.backend().name()),
                                          .kernel_isa = (*backend)->kernel_isa(),
                                          .num_pages = pool.num_pages,
                                          .kv_dtype = (*backend)->kv_dtype(),
                                          .kv_pool_bytes = (*backend)->kv_pool_bytes()});
  std::unique_ptr<worker_app::OffloadMetrics> offload_metrics;
  if (offloader) offload_metrics = std::make_unique<worker_app::OffloadMetrics>(registry, sc.name);
  std::unique_ptr<metrics_http::MetricsServer> metrics_server;
  if (config.metrics_port >= 0) {
    const std::string health = "{\"status\":\"ok\",\"worker\":\"" + sc.name + "\"}";
    auto ms = metrics_http::MetricsServer::start(
        config.metrics_host, config.metrics_port,
        {.metrics = [&wm, &offloader, &offload_metrics] {
           if (offloader) offload_metrics->publish(offloader->stats());
           return wm.render();
         },
         .health = [health] { return metrics_http::Answer{.status = 200, .body = health}; },
         .ready = [&wm] {
           const bool ready = wm.registered() && !wm.draining();
           return metrics_http::Answer{.status = ready ? 200 : 503,
                                       .body = std::string("{\"ready\":") + (ready ? "true" : "false") +
                                               ",\"registered\":" + (wm.registered() ? "true" : "false") +
                                               ",\"draining\":" + (wm.draining() ? "true" : "false") + "}"};
         }});
    if (!ms.ok()) {
      std::fprintf(stderr, "tessera-worker: --metrics-port: %s\n", ms.error().to_string().c_str());
      return 1;
    }
    metrics_server = std::move(*ms);
  }
  std::printf("READY worker=%s pages=%d page_size=%d backend=%s metrics=%d\n", sc.name.c_str(), pool.num_pages,
              pool.page_size, std::string(executor.backend().name()).c_str(),
              metrics_server ? metrics_server->port() : -1);
  std::fflush(stdout);
  std::string caps;
  for (const std::string& c : executor.capabilities()) caps += (caps.empty() ? "" : ",") + c;
  TS_LOG(kInfo) << "worker=" << sc.name << " | model " << config.model << " (" << (*model)->parameter_count()
                << " parameters), " << pool.num_pages << " pages x " << pool.page_size << " tokens; "
                << (*backend)->describe() << " (" << why << "); capabilities " << caps << "; scheduler "
                << sc.scheduler_endpoint;
  if (sc.min_step_ms > 0) {
    TS_LOG(kWarn) << "worker=" << sc.name << " | pacing: every step lasts at least " << sc.min_step_ms
                  << " ms (--min-step-ms; a demo/test knob, not for serving)";
  }
  if (!config.placement_rules.empty()) {
    TS_LOG(kInfo) << "worker=" << sc.name << " | placement rules " << config.placement_rules << ": "
                  << placement::summarize(placed);
  }
  if (!executor.backend().capabilities().kv_fill) {
    TS_LOG(kWarn) << "worker=" << sc.name << " | the " << executor.backend().name()
                  << " backend lacks kv_fill: step plans with preference K/V fills are refused (error names the capability)";
  }
  Status st = worker_app::run_service(sc, **model, executor, signals::stop_flag(), &wm);
  if (!st.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", st.error().to_string().c_str());
    return 1;
  }
  TS_LOG(kInfo) << "worker=" << sc.name << " | exiting";
  return 0;
}
