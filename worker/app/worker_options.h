// tessera-worker's option table. Every option is declared once, in worker_options.cpp, bound to a
// member below (or of the structs it holds); the member's initializer is its default. The binary
// parses it (main.cpp) and `tessera up` reads it to forward the options it shares.
//
// To add an option: give it a member here (or use one of BackendOptions, ServiceConfig, ...)
// with its default as the initializer, declare it in worker_options.cpp, use the member in main.cpp.
//
// Ownership: declare_options() binds `options` to members of `config`, which must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/worker/kv_offload.h"

#include "tessera/common/config.h"
#include "tessera/kvstore/client.h"
#include "tessera/worker/preference.h"
#include "backend_select.h"
#include "worker_service.h"

namespace tessera::worker_app {

struct WorkerOptions {
  std::string model;  // required
  std::string tokenizer;  // for structured output when the model file embeds no vocabulary ("" = none)
  std::string backend = "auto";  // cpu | cuda | auto (backend_select.h)
  std::string placement_rules;   // YAML placement rules (tessera/placement/placement.h); "" = as stored
  BackendOptions backend_options{.pool = {.num_pages = 1024, .page_size = 16}};  // max_batch_tokens: from service
  ServiceConfig service;
  int32_t eos_id = -2;  // -2 = the model file's (else 2 for llama2.c), -1 = none
  kvstore::ClientConfig kvstore{.endpoint = "", .timeout_ms = 2000};  // "" = no kvstore
  worker::InjectorConfig injector;
  // K/V offload to the kvstore (docs/kv.md "K/V offload to the kvstore"); needs --kvstore.
  bool kv_offload = false;
  std::string kv_offload_codec = "int8";  // any kvstore codec name (kvstore::parse_codec)
  std::string kv_offload_dtype = "f16";  // element type spilled pages are stored from: f16 or f32
  int64_t kv_offload_max_pending_mb = 64;
  std::string metrics_host = "127.0.0.1";  // GET /metrics, /health, /ready (worker_metrics.h)
  int metrics_port = 0;                    // 0 = any free port (in the READY line), -1 = off
  curve::Settings curve;  // --curve-dir / --insecure (docs/security.md)
};

void declare_options(config::Options& options, WorkerOptions& config);

}  // namespace tessera::worker_app
