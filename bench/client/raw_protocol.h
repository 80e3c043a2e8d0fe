// The baseline of the client benchmark: the protocol spoken directly with cppzmq + msgpack-c, as
// a minimal program would (docs/protocol.md "Python example", in C++), and a "blast" frontend
// that answers every request with N token events and a final as fast as the socket takes them.
// Neither is thread-safe: one thread each.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::bench {

struct RawResult {
  uint64_t events = 0;  // token events received
  uint64_t bytes = 0;   // text bytes received
};

// A DEALER connected to `endpoint` (kept across runs, as the client's connection is).
class RawClient {
 public:
  explicit RawClient(const std::string& endpoint);
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  // `requests` completions of `prompt` (max_tokens, temperature 0, ignore_eos) with at most
  // `in_flight` at once, each reply decoded (type, id, text, tokens appended per request).
  RawResult run(const std::string& prompt, int requests, int in_flight, int max_tokens, bool stream);

 private:
  struct Impl;
  Impl* impl_;
  uint64_t next_id_ = 1;
};

// Forks a blast frontend on tcp://127.0.0.1:<port> (its endpoint is returned); it answers a
// heartbeat with a heartbeat and a completion with max_tokens token events then a final, and
// exits when the parent does. The pid is stored in *pid.
std::string start_blast_frontend(int* pid);

}  // namespace tessera::bench
