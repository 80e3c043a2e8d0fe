// `tessera up` on a freshly drawn block of loopback ports (ports.h), retried on a new block when,
// and only when, its start-up failed because one of those ports was taken between the draw and
// the bind (a concurrent test's server won the race): `up`'s own check ("port N (...) on HOST is
// already in use by another process") or a child's bind error ("Address already in use", as
// boost and ZeroMQ spell EADDRINUSE) in the attempt's log. Any other outcome — ready, or a failure
// for another reason — is returned as it is, for the test to check as it would without retries.
//
// Ownership: the returned UpStart owns the last attempt's process (its destructor terminates
// it); earlier attempts are terminated before the next starts. Not thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/testing/process.h"

namespace tessera::testing {

struct UpStart {
  int base = -1;                // the block's first port; -1 when no free block was found
  std::unique_ptr<Process> up;  // the last attempt; nullptr when base is -1
  std::string ready;            // its "tessera up: cluster ready" line; "" when it printed none
  int attempts = 0;             // 1 + the retries on fresh ports
};

// Draws a block of `n_ports` free ports, starts `bin_path("tessera")` with `args(base)` (stderr
// to `log_path`) and waits up to `ready_timeout` for the ready line (or up's exit); at most
// `max_attempts` attempts. A retried attempt's log is kept as `log_path` + ".in-use-<attempt>".
UpStart start_up(const std::function<std::vector<std::string>(int base)>& args, const std::string& log_path,
                 std::chrono::milliseconds ready_timeout, int n_ports = 14, int max_attempts = 3);

// True when the log at `path` says that a port was already in use (the two messages above).
bool log_says_address_in_use(const std::string& path);

}  // namespace tessera::testing
