#include "tessera/testing/up_start.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "tessera/testing/paths.h"
#include "tessera/testing/ports.h"

namespace tessera::testing {

bool log_says_address_in_use(const std::string& path) {
  std::ifstream f(path);
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return all.find("is already in use by another process") != std::string::npos ||
         all.find("Address already in use") != std::string::npos;
}

UpStart start_up(const std::function<std::vector<std::string>(int base)>& args, const std::string& log_path,
                 std::chrono::milliseconds ready_timeout, int n_ports, int max_attempts) {
  UpStart s;
  std::random_device rd;
  for (s.attempts = 1;; ++s.attempts) {
    s.base = free_port_block(n_ports, static_cast<unsigned>(::getpid()) ^ rd());
    if (s.base < 0) {
      s.up.reset();
      return s;
    }
    s.up = std::make_unique<Process>(bin_path("tessera"), args(s.base), log_path);
    s.ready = s.up->wait_line("tessera up: cluster ready", ready_timeout);
    if (!s.ready.empty() || s.attempts >= max_attempts || !log_says_address_in_use(log_path)) return s;
    std::fprintf(stderr, "start_up: a port of %d..%d was taken before tessera up bound it (%s); retrying on fresh ports\n",
                 s.base, s.base + n_ports - 1, log_path.c_str());
    (void)s.up->terminate(std::chrono::seconds(15));  // it stops its children first
    s.up.reset();
    std::error_code ec;
    std::filesystem::rename(log_path, log_path + ".in-use-" + std::to_string(s.attempts), ec);
  }
}

}  // namespace tessera::testing
