// Fixed loopback ports for tests that must name them up front (`tessera up` takes a base port and
// derives the others from it): a block of free ports chosen below the kernel's ephemeral range.
//
// Why below it: a port of the ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by
// default) can be taken at any moment by the outgoing connection of any process — a concurrent
// test's client, ZeroMQ's reconnects — between our probe and the server's bind. Below the range
// only servers that bind fixed ports compete, and the probe sees them.
//
// Header-only, stateless; thread-safe (each call opens and closes its own sockets).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>

namespace tessera::testing {

// True when 127.0.0.1:`port` can be bound now (TCP; SO_REUSEADDR: TIME_WAIT leftovers of earlier
// connections do not count as "in use").
inline bool port_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// The first port of the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range; 32768
// when unreadable).
inline int ephemeral_port_low() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  return (f >> low >> high) && low > 1024 ? low : 32768;
}

// A base port with base .. base + n - 1 all free, drawn at random from [10000, the ephemeral
// range's start) (from [1024, ...) should the range start at or below 10000 + n); -1 when 200
// draws found none. `seed` varies the draws between concurrent test processes (e.g. the pid).
inline int free_port_block(int n, unsigned seed) {
  const int high = ephemeral_port_low();
  const int low = high > 10000 + n ? 10000 : 1024;
  if (high - n <= low) return -1;
  std::mt19937 rng(seed);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int base = low + static_cast<int>(rng() % static_cast<unsigned>(high - n - low));
    bool ok = true;
    for (int p = base; p < base + n && ok; ++p) ok = port_free(p);
    if (ok) return base;
  }
  return -1;
}

}  // namespace tessera::testing
