// Start-up checks of `tessera up` (tools/src/cmd_up.cpp; docs/operations.md "Start-up checks"):
// the frontend's instance id, whether a port is taken, where the demo model is.
// Stateless functions; thread-safe.
#pragma once

#include <filesystem>
#include <string>

namespace tessera::tools::up {

// A random id for the frontend's --instance-id ("up-" + 16 hex digits): `up` counts /ready as
// its own only when the answer echoes it.
std::string new_instance_id();

// True when `host:port` (an IP literal) cannot be bound because something listens there
// (EADDRINUSE), binding with SO_REUSEADDR as the children do. Any other failure (a name, no
// IPv6) is false: left to the child to report.
bool port_taken(const std::string& host, int port);

// The directory of the stories260K demo model (stories260K.bin + tok512.bin) in the test data:
// $TESSERA_SHARED_DIR, the build's TESSERA_SHARED_DIR, ./../shared, then <bin>/../../../shared
// (a checkout's build/bin next to ../shared); "" when none has it.
std::string find_demo_model(const std::filesystem::path& bin_dir);

}  // namespace tessera::tools::up
