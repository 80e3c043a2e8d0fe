// Start-up checks of `tessera up`: see up_checks.h.
#include "up_checks.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace tessera::tools::up {

namespace fs = std::filesystem;

std::string new_instance_id() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return std::string("up-") + buf;
}

bool port_taken(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) return false;
  bool taken = false;
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    const int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    taken = ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 && errno == EADDRINUSE;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return taken;
}

std::string find_demo_model(const fs::path& bin_dir) {
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("TESSERA_SHARED_DIR"); env != nullptr && *env != '\0') roots.emplace_back(env);
#ifdef TESSERA_DEFAULT_SHARED_DIR
  roots.emplace_back(TESSERA_DEFAULT_SHARED_DIR);
#endif
  std::error_code cwd_error;
  if (const fs::path cwd = fs::current_path(cwd_error); !cwd_error) roots.push_back(cwd / ".." / "shared");
  roots.push_back(bin_dir / ".." / ".." / ".." / "shared");  // <repo>/build/bin -> <repo>/../shared
  for (const fs::path& r : roots) {
    std::error_code ec;
    const fs::path dir = r / "models" / "stories260K";
    if (fs::exists(dir / "stories260K.bin", ec) && fs::exists(dir / "tok512.bin", ec)) return fs::weakly_canonical(dir, ec).string();
  }
  return "";
}

}  // namespace tessera::tools::up
