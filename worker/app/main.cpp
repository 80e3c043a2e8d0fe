// tessera-worker: loads a model, builds the chosen backend (--backend cpu|cuda|auto,
// backend_select.h) with its StepExecutor and serves step plans for one scheduler
// (worker_service.h). Every option is declared once below (flag, [worker] config key, env var).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/common/log.h"
#include "backend_select.h"
#include "tessera/model/model.h"
#include "tessera/worker/preference.h"
#include "worker_service.h"

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

void declare_options(tessera::config::Options& o) {
  using tessera::config::Type;
  o.add({.name = "scheduler", .type = Type::kString, .default_value = "tcp://127.0.0.1:8101",
         .help = "the scheduler's worker endpoint (ZeroMQ ROUTER) to register with", .env = "TESSERA_WORKER_SCHEDULER"});
  o.add({.name = "model", .type = Type::kString, .default_value = "",
         .help = "model file or directory (GGUF, safetensors directory, llama2.c checkpoint); required",
         .env = "TESSERA_MODEL"});
  o.add({.name = "name", .type = Type::kString, .default_value = "",
         .help = "worker name, unique per scheduler (\"\" = hostname:pid)", .env = "TESSERA_WORKER_NAME"});
  o.add({.name = "backend", .type = Type::kString, .default_value = "auto",
         .help = "compute backend: cpu, cuda, or auto (cuda when compiled in and a GPU is present, unless --kvstore "
                 "needs kv_fill; else cpu)",
         .env = "TESSERA_WORKER_BACKEND", .choices = {"auto", "cpu", "cuda"}});
  o.add({.name = "tensor-parallel", .type = Type::kInt, .default_value = "1",
         .help = "cuda: GPUs of this node to shard the model over (tensor parallelism, needs NCCL when > 1)",
         .env = "TESSERA_WORKER_TENSOR_PARALLEL", .min = 1, .max = 64});
  o.add({.name = "cuda-dtype", .type = Type::kString, .default_value = "bf16",
         .help = "cuda: type of weights, activations and K/V pages on the GPU", .env = "TESSERA_WORKER_CUDA_DTYPE",
         .choices = {"bf16", "f16"}});
  o.add({.name = "num-pages", .type = Type::kInt, .default_value = "1024",
         .help = "K/V pages in the pool (each holds page-size tokens for every layer)", .env = "TESSERA_NUM_PAGES",
         .min = 1, .max = 1 << 24});
  o.add({.name = "page-size", .type = Type::kInt, .default_value = "16", .help = "tokens per K/V page",
         .env = "TESSERA_PAGE_SIZE", .min = 1, .max = 1024});
  o.add({.name = "max-batch-tokens", .type = Type::kInt, .default_value = "1024",
         .help = "token budget of one step (decodes + prefill chunks)", .env = "TESSERA_MAX_BATCH_TOKENS",
         .min = 1, .max = 1 << 20});
  o.add({.name = "threads", .type = Type::kInt, .default_value = "0", .help = "compute threads (0 = all cores)",
         .env = "TESSERA_WORKER_THREADS", .min = 0, .max = 1024});
  o.add({.name = "eos-id", .type = Type::kInt, .default_value = "-2",
         .help = "end-of-sequence token (-2 = the model file's, else 2 as in llama2.c; -1 = none)",
         .env = "TESSERA_EOS_ID", .min = -2, .max = 1 << 30});
  o.add({.name = "heartbeat-ms", .type = Type::kInt, .default_value = "500",
         .help = "heartbeat interval until the scheduler's ack sets it", .env = "TESSERA_WORKER_HEARTBEAT_MS",
         .min = 10, .max = 60000});
  o.add({.name = "scheduler-dead-ms", .type = Type::kInt, .default_value = "3000",
         .help = "scheduler silence after which the worker registers again", .env = "TESSERA_WORKER_SCHEDULER_DEAD_MS",
         .min = 50, .max = 600000});
  o.add({.name = "kvstore", .type = Type::kString, .default_value = "",
         .help = "tessera-kvstore endpoint for preference K/V (DKI); \"\" = compute every preference, cache nothing",
         .env = "TESSERA_WORKER_KVSTORE"});
  o.add({.name = "kvstore-timeout-ms", .type = Type::kInt, .default_value = "2000",
         .help = "kvstore request timeout; after a failure gets pause 5 s (preferences are computed meanwhile)",
         .env = "TESSERA_WORKER_KVSTORE_TIMEOUT_MS", .min = 10, .max = 600000});
  o.add({.name = "kv-codec", .type = Type::kString, .default_value = "int8",
         .help = "codec of preference K/V put to the kvstore (int8/int4 use group 64)", .env = "TESSERA_WORKER_KV_CODEC",
         .choices = {"none", "zstd", "int8", "int4"}});
  o.add({.name = "log-level", .type = Type::kString, .default_value = "info", .help = "log level",
         .env = "TESSERA_LOG_LEVEL", .choices = {"debug", "info", "warn", "error", "off"}});
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  log::set_component("worker");
  config::Options options("tessera-worker", "worker");
  declare_options(options);
  if (Status st = options.parse(std::vector<std::string>(argv + 1, argv + argc)); !st.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", st.error().message.c_str());
    return 2;
  }
  if (options.help_requested()) {
    std::printf("%s", options.help().c_str());
    return 0;
  }
  log::set_level(options.get("log-level"));
  if (options.get("model").empty()) {
    std::fprintf(stderr, "tessera-worker: --model is required (a GGUF file, safetensors directory or llama2.c .bin)\n");
    return 2;
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);

  // The backend is chosen (and its absence reported) before the model is loaded.
  std::string why;
  auto backend_name = worker_app::resolve_backend(options.get("backend"), !options.get("kvstore").empty(), &why);
  if (!backend_name.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", backend_name.error().message.c_str());
    return 1;
  }
  auto model = load_model(options.get("model"));
  if (!model.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", model.error().to_string().c_str());
    return 1;
  }
  worker_app::BackendOptions bo;
  bo.pool = {.num_pages = static_cast<int32_t>(options.get_int("num-pages")),
             .page_size = static_cast<int32_t>(options.get_int("page-size"))};
  bo.threads = static_cast<int32_t>(options.get_int("threads"));
  bo.max_batch_tokens = static_cast<int32_t>(options.get_int("max-batch-tokens"));
  bo.tensor_parallel = static_cast<int32_t>(options.get_int("tensor-parallel"));
  bo.cuda_dtype = options.get("cuda-dtype");
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
  if (!options.get("kvstore").empty()) {
    auto ps = worker::connect_kvstore({.endpoint = options.get("kvstore"),
                                       .timeout_ms = static_cast<int>(options.get_int("kvstore-timeout-ms"))});
    if (!ps.ok()) {
      std::fprintf(stderr, "tessera-worker: --kvstore: %s\n", ps.error().to_string().c_str());
      return 1;
    }
    pref_store = std::move(ps).value();
  }
  worker::InjectorConfig ic;
  ic.codec.codec = kvstore::parse_codec(options.get("kv-codec")).value();  // validated by the option's choices
  worker::PreferenceInjector injector(pref_store.get(), ic);
  if (executor.backend().capabilities().kv_fill) injector.attach(executor);

  worker_app::ServiceConfig sc;
  sc.scheduler_endpoint = options.get("scheduler");
  sc.name = options.get("name");
  if (sc.name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    sc.name = std::string(host) + ":" + std::to_string(getpid());
  }
  sc.max_batch_tokens = static_cast<int32_t>(options.get_int("max-batch-tokens"));
  const int64_t eos = options.get_int("eos-id");
  const bool llama2c = (*model)->format() == ModelFormat::kLlama2c;
  sc.eos_id = eos != -2 ? static_cast<int32_t>(eos) : ((*model)->vocab.eos_id >= 0 ? (*model)->vocab.eos_id : (llama2c ? 2 : -1));
  sc.heartbeat_ms = static_cast<int>(options.get_int("heartbeat-ms"));
  sc.dead_after_ms = static_cast<int>(options.get_int("scheduler-dead-ms"));

  const worker::PoolGeometry pool = executor.backend().geometry();
  std::printf("READY worker=%s pages=%d page_size=%d backend=%s\n", sc.name.c_str(), pool.num_pages, pool.page_size,
              std::string(executor.backend().name()).c_str());
  std::fflush(stdout);
  std::string caps;
  for (const std::string& c : executor.capabilities()) caps += (caps.empty() ? "" : ",") + c;
  TS_LOG(kInfo) << "worker=" << sc.name << " | model " << options.get("model") << " (" << (*model)->parameter_count()
                << " parameters), " << pool.num_pages << " pages x " << pool.page_size << " tokens; "
                << (*backend)->describe() << " (" << why << "); capabilities " << caps << "; scheduler "
                << sc.scheduler_endpoint;
  if (!executor.backend().capabilities().kv_fill) {
    TS_LOG(kWarn) << "worker=" << sc.name << " | the " << executor.backend().name()
                  << " backend lacks kv_fill: step plans with preference K/V fills are refused (error names the capability)";
  }
  Status st = worker_app::run_service(sc, **model, executor, g_stop);
  if (!st.ok()) {
    std::fprintf(stderr, "tessera-worker: %s\n", st.error().to_string().c_str());
    return 1;
  }
  TS_LOG(kInfo) << "worker=" << sc.name << " | exiting";
  return 0;
}
