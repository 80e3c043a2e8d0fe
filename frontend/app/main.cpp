// tessera-frontend: see frontend/include/tessera/frontend/frontend.h and docs/api.md.
#include <cstdio>
#include <string>

#include "tessera/common/config.h"
#include "tessera/common/log.h"
#include "tessera/common/signals.h"
#include "tessera/frontend/frontend.h"

int main(int argc, char** argv) {
  using namespace tessera;
  log::set_component("frontend");
  frontend::FrontendConfig config;
  config::Options options("tessera-frontend", "frontend");
  frontend::declare_options(options, config);
  options.describe("The OpenAI-compatible HTTP server and the msgpack client API, in front of the schedulers");
  if (auto exit_code = config::parse_command_line(options, std::vector<std::string>(argv + 1, argv + argc)))
    return *exit_code;

  signals::install();  // before any thread starts (signals.h)

  auto fe = frontend::Frontend::create(config);
  if (!fe.ok()) {
    std::fprintf(stderr, "tessera-frontend: %s\n", fe.error().to_string().c_str());
    return 1;
  }
  // One machine-readable line for supervisors and tests (ports may have been chosen by the OS).
  std::printf("LISTENING http=%d instance=%s zmq=%s\n", (*fe)->http_port(), (*fe)->instance_id().c_str(),
              (*fe)->zmq_endpoint().c_str());
  std::fflush(stdout);
  TS_LOG(kInfo) << "serving http on port " << (*fe)->http_port() << ", zmq client api on " << (*fe)->zmq_endpoint();

  frontend::Frontend* raw = fe->get();
  // The first SIGTERM/SIGINT drains (docs/operations.md "Drain"), a second one stops at once.
  signals::OnStop on_stop([raw](int sig) {
    if (raw->drain()) {
      TS_LOG(kInfo) << "signal " << sig << ": draining (a second signal stops at once)";
      return;
    }
    TS_LOG(kInfo) << "signal " << sig << ": shutting down";
    raw->stop();
  });
  (*fe)->run();
  return 0;
}
