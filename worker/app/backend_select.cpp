// --backend cpu|cuda|auto (backend_select.h).
#include "backend_select.h"

#include <string>

#include "tessera/kernels/isa.h"
#include "tessera/worker/sim_backend.h"

namespace tessera::worker_app {
namespace {

class CpuServing final : public ServingBackend {
 public:
  explicit CpuServing(std::unique_ptr<worker::Engine> e) : engine_(std::move(e)) {}
  worker::StepExecutor& executor() override { return engine_->executor(); }
  std::string describe() const override {
    return "cpu backend, " + std::to_string(engine_->threads()) + " threads, kernels " + kernels::isa_name(engine_->isa()) +
           ", " + std::to_string(engine_->pool().num_pages()) + " " + kernels::kv_dtype_name(engine_->pool().dtype()) +
           " K/V pages (" + std::to_string(engine_->pool().bytes() >> 20) + " MiB)";
  }
  std::string kernel_isa() const override { return kernels::isa_name(engine_->isa()); }
  std::string kv_dtype() const override { return kernels::kv_dtype_name(engine_->pool().dtype()); }
  int64_t kv_pool_bytes() const override { return static_cast<int64_t>(engine_->pool().bytes()); }

 private:
  std::unique_ptr<worker::Engine> engine_;
};

// The sim backend and its executor (the executor borrows the backend: declared after it).
class SimServing final : public ServingBackend {
 public:
  explicit SimServing(std::unique_ptr<worker::SimBackend> b)
      : backend_(std::move(b)), executor_(std::make_unique<worker::StepExecutor>(*backend_)) {}
  worker::StepExecutor& executor() override { return *executor_; }
  std::string describe() const override {
    const worker::SimOptions& o = backend_->options();
    return "sim backend (no weights computed), " + o.cost.to_string() + ", time scale " + std::to_string(o.time_scale) +
           ", " + std::to_string((int64_t{o.pool.num_pages} * o.pool.page_size * 8) >> 10) + " KiB of slot states";
  }
  std::string kernel_isa() const override { return "sim"; }

 private:
  std::unique_ptr<worker::SimBackend> backend_;
  std::unique_ptr<worker::StepExecutor> executor_;
};

}  // namespace

Result<std::string> resolve_backend(const std::string& requested, bool needs_kv_fill, std::string* why) {
  auto say = [why](std::string s) {
    if (why != nullptr) *why = std::move(s);
  };
  if (requested == "cpu") {
    say("--backend cpu");
    return std::string("cpu");
  }
  if (requested == "cuda") {
    if (!cuda_support::compiled_in()) {
      return make_error(ErrorCode::kUnsupported, "--backend cuda: CUDA support was not compiled in (configure with "
                                                 "-DTESSERA_CUDA=ON on a machine with nvcc)");
    }
    if (needs_kv_fill) {  // a configuration error, whatever the hardware
      return make_error(ErrorCode::kUnsupported, "--backend cuda with --kvstore: the cuda backend lacks capability kv_fill "
                                                 "(preference K/V injection); use --backend cpu for preference requests");
    }
    auto n = cuda_support::probe_devices();
    if (!n.ok()) return make_error(n.error().code, "--backend cuda: " + n.error().message);
    say("--backend cuda, " + std::to_string(*n) + " device(s)");
    return std::string("cuda");
  }
  if (requested == "sim") {
    if (needs_kv_fill) {
      return make_error(ErrorCode::kUnsupported, "--backend sim with --kvstore: the sim backend lacks capability kv_fill "
                                                 "(preference K/V injection)");
    }
    say("--backend sim");
    return std::string("sim");
  }
  if (requested != "auto") {
    return make_error(ErrorCode::kInvalidArgument, "--backend must be cpu, cuda, sim or auto (got '" + requested + "')");
  }
  if (!cuda_support::compiled_in()) {
    say("auto: CUDA support not compiled in");
    return std::string("cpu");
  }
  auto n = cuda_support::probe_devices();
  if (!n.ok()) {
    say("auto: " + n.error().message);
    return std::string("cpu");
  }
  if (needs_kv_fill) {
    say("auto: " + std::to_string(*n) + " CUDA device(s), but --kvstore needs kv_fill, which the cuda backend lacks");
    return std::string("cpu");
  }
  say("auto: " + std::to_string(*n) + " CUDA device(s)");
  return std::string("cuda");
}

Result<std::unique_ptr<ServingBackend>> create_backend(const std::string& resolved, const Model& model,
                                                       const BackendOptions& options) {
  if (resolved == "cuda") return cuda_support::create(model, options);
  if (resolved == "sim") {
    worker::SimOptions so{.pool = options.pool, .time_scale = options.sim_time_scale, .eos = options.eos};
    TS_ASSIGN_OR_RETURN(so.cost, options.sim_cost.empty() ? worker::sim_profile(options.sim_profile)
                                                          : worker::parse_sim_cost(options.sim_cost));
    TS_ASSIGN_OR_RETURN(auto sim, worker::SimBackend::create(model, so));
    return std::unique_ptr<ServingBackend>(new SimServing(std::move(sim)));
  }
  if (resolved != "cpu") return make_error(ErrorCode::kInvalidArgument, "unknown backend '" + resolved + "'");
  worker::EngineOptions eo;
  eo.pool = options.pool;
  eo.threads = options.threads;
  eo.blend = options.blend;
  eo.blend.cache_bytes = options.blend_cache_mb << 20;
  eo.weight_repack = options.weight_repack;
  TS_ASSIGN_OR_RETURN(auto engine, worker::Engine::create(model, eo));
  return std::unique_ptr<ServingBackend>(new CpuServing(std::move(engine)));
}

}  // namespace tessera::worker_app
