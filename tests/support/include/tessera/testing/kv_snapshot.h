// The scheduler's kv_snapshot request (docs/protocol.md, "K/V events"), as the tests that ask
// for a snapshot send it: a msgpack map {v: 1, type: "kv_snapshot", id}.
#pragma once

#include <msgpack.hpp>

#include <cstdint>
#include <string>

namespace tessera::testing {

inline std::string kv_snapshot_request(uint64_t id) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> p(b);
  p.pack_map(3);
  p.pack(std::string("v"));
  p.pack(1);
  p.pack(std::string("type"));
  p.pack(std::string("kv_snapshot"));
  p.pack(std::string("id"));
  p.pack(id);
  return std::string(b.data(), b.size());
}

}  // namespace tessera::testing
