// tessera-scheduler's option table. Every option is declared once, in scheduler_options.cpp, bound to a
// member below (or of ServiceConfig, service.h); the member's initializer is its default. The
// binary parses it (main.cpp) and `tessera up` reads it to forward the options it shares.
//
// Ownership: declare_options() binds `options` to members of `config`, which must outlive it.
#pragma once

#include <string>

#include "service.h"
#include "tessera/common/config.h"

namespace tessera::scheduler_app {

struct SchedulerOptions {
  ServiceConfig service;
  std::string metrics_host = "127.0.0.1";  // Prometheus /metrics address
  int metrics_port = 8102;                 // 0 = any free port, -1 = off
  int health_stall_ms = 5000;              // /health is 503 when the event loop has not iterated for this long
};

void declare_options(config::Options& options, SchedulerOptions& config);

}  // namespace tessera::scheduler_app
