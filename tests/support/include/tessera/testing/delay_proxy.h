// A TCP relay on loopback that adds a round-trip time: every connection accepted on port() is
// relayed to `target_host:target_port`, and each chunk of bytes read on one side is written to
// the other no earlier than `rtt / 2` after it was read (both directions), so a request-reply
// exchange through it takes at least `rtt` — a slow link for tests where the kernel has no
// sch_netem and the test may not create network namespaces (e.g. the kvstore's get_many budget,
// docs/kvstore.md). Bytes keep their order; a side's EOF reaches the other side after the bytes
// before it (shutdown(SHUT_WR)); an error on either side closes both. Up to 64 MiB may wait per
// direction (reading stops beyond).
//
// A gate for tests that need an operation provably in flight: after hold_upstream_after(n), each
// connection forwards at most n more bytes towards the target, then holds the rest (still read,
// up to the 64 MiB above) until release(); held_bytes() says how much is held. So a big write
// (a multi-megabyte SET) is held mid-way while a connection's small requests (PINGs, short
// commands: fewer than n bytes since the hold) pass; replies are never held.
//
// An optional observer sees every chunk as it is read, before the delay: (the connection's number,
// 0 for the first accepted; true for bytes from the client, false for bytes from the target; the
// bytes) — e.g. to count a protocol's requests and replies in flight (redis_get_many_window_test).
//
// Threading: one relay thread (poll), which also runs the observer; the object itself is used
// from one thread (held_bytes() from any). The destructor stops the thread and closes every socket.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <string>
#include <thread>

namespace tessera::testing {

class DelayProxy {
 public:
  using Observer = std::function<void(int connection, bool from_client, std::string_view bytes)>;

  // nullptr (after printing why) when the listening socket cannot be made.
  static std::unique_ptr<DelayProxy> start(const std::string& target_host, int target_port,
                                           std::chrono::microseconds rtt, Observer observer = {});
  ~DelayProxy();
  DelayProxy(const DelayProxy&) = delete;
  DelayProxy& operator=(const DelayProxy&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_.load(); }  // accepted so far
  // The gate above. hold_upstream_after counts each connection's bytes from the call on (a
  // second call starts the count again); release() forwards what is held and lifts the gate.
  void hold_upstream_after(size_t bytes);
  void release();
  size_t held_bytes() const { return held_bytes_.load(); }  // held by the gate now, all connections

 private:
  DelayProxy() = default;
  void loop();
  void wake(char why);  // 'x' stops the loop; 'g' makes it look at the gate again

  std::string host_;
  int target_port_ = 0;
  std::chrono::microseconds half_{0};
  Observer observer_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: the destructor writes to stop the loop
  int port_ = 0;
  std::atomic<int> connections_{0};
  // The gate: gate_epoch_ counts hold_upstream_after calls (0 = never held); gate_open_ is true
  // when no hold is in force. Written by the test's thread, read by the relay thread.
  std::atomic<uint64_t> gate_epoch_{0};
  std::atomic<size_t> gate_bytes_{0};
  std::atomic<bool> gate_open_{true};
  std::atomic<size_t> held_bytes_{0};
  std::thread thread_;
};

}  // namespace tessera::testing
