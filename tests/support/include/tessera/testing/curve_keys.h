// CURVE keys for the processes a test starts (common/curve.h, docs/security.md): every service
// refuses to start without --curve-dir or --insecure, so tests run the cluster secured, as it
// is deployed.
//
//   Process sched(bin_path("tessera-scheduler"), with_keys({"--metrics-port", "0"}), log);
//   zmq::socket_t s(ctx, zmq::socket_type::dealer);
//   secure_client(s, curve::Role::kFrontend, curve::Role::kScheduler);  // before connect()
//
// The key set (`tessera keys` layout) is made once per test binary in a temporary directory.
// Thread-safe (the set is made under a function-local static).
#pragma once

#include <string>
#include <vector>

#include "tessera/common/curve.h"

namespace zmq {
class socket_t;
}

namespace tessera::testing {

// The test binary's key directory (made on first use).
const std::string& curve_dir();
// `args` with "--curve-dir <curve_dir()>" appended.
std::vector<std::string> with_keys(std::vector<std::string> args);
// The keys a process of role `as` uses to reach `server`.
curve::ClientKeys client_keys(curve::Role as, curve::Role server);
// Makes `socket` a CURVE client of `server` with the key of role `as` (before connect()).
void secure_client(zmq::socket_t& socket, curve::Role as, curve::Role server);

}  // namespace tessera::testing
