#include "tessera/testing/curve_keys.h"

#include <cstdio>
#include <cstdlib>

#include <zmq.hpp>

#include "tessera/testing/paths.h"

namespace tessera::testing {

const std::string& curve_dir() {
  static const std::string dir = [] {
    const std::string d = make_temp_dir("tessera-test-keys") + "/keys";
    const Status st = curve::generate_key_set(d);
    if (!st.ok()) {
      std::fprintf(stderr, "curve_dir: %s\n", st.error().to_string().c_str());
      std::abort();
    }
    return d;
  }();
  return dir;
}

std::vector<std::string> with_keys(std::vector<std::string> args) {
  args.insert(args.end(), {"--curve-dir", curve_dir()});
  return args;
}

curve::ClientKeys client_keys(curve::Role as, curve::Role server) {
  auto keys = curve::Keys::load({.dir = curve_dir()}, as);
  auto out = keys.ok() ? keys->client_of(server) : keys.error();
  if (!out.ok()) {
    std::fprintf(stderr, "client_keys: %s\n", out.error().to_string().c_str());
    std::abort();
  }
  return *out;
}

void secure_client(zmq::socket_t& socket, curve::Role as, curve::Role server) {
  curve::make_client(socket, client_keys(as, server));
}

}  // namespace tessera::testing
